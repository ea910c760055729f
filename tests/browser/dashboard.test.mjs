// Dashboard tests in real headless Chromium, against a real
// Stockade server binary and the real Docker engine. One server and one
// browser for the whole run (lib/harness.mjs); each file under suite/ holds
// the tests of one part of the dashboard, in this order.
import './lib/harness.mjs';
import './suite/basics.mjs';
import './suite/selection.mjs';
import './suite/terminal.mjs';
import './suite/files.mjs';
import './suite/everything.mjs';
import './suite/url.mjs';
import './suite/readable.mjs';
import './suite/limits.mjs';
import './suite/credentials.mjs';
import './suite/notebook.mjs';
import './suite/pause.mjs';
import './suite/events.mjs';
import './suite/apidocs.mjs';
import './suite/firsthour.mjs';
import './suite/volumes.mjs';
import './suite/templates.mjs';
