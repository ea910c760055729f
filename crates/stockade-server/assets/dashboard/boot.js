// Loads the dashboard's styles and modules, trying again when a request is
// cut off. A browser on the Docker host drops the connections it is setting
// up whenever Docker adds or removes a network interface (a sandbox starts
// or stops: net::ERR_NETWORK_CHANGED), and one lost module would otherwise
// leave a blank page.

const STYLES = ['/dashboard/xterm.css', '/dashboard/app.css'];
const ATTEMPTS = 5;
const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

function stylesheet(href, attempt) {
  return new Promise((resolve, reject) => {
    const link = document.createElement('link');
    link.rel = 'stylesheet';
    link.href = attempt ? `${href}?attempt=${attempt}` : href;
    link.onload = () => resolve(link);
    link.onerror = () => {
      link.remove();
      reject(new Error(`${href} did not load`));
    };
    document.head.append(link);
  });
}

async function retried(load) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await load(attempt);
    } catch (e) {
      if (attempt + 1 >= ATTEMPTS) throw e;
      await sleep(200 * 2 ** attempt);
    }
  }
}

try {
  await Promise.all(STYLES.map((href) => retried((attempt) => stylesheet(href, attempt))));
  // A module that failed to arrive is fetched again by the next import.
  await retried(() => import('./app.js'));
} catch (e) {
  const message = document.createElement('p');
  message.setAttribute('role', 'alert');
  message.textContent = `The dashboard could not load (${e.message}). Reload the page to try again.`;
  document.body.prepend(message);
}
