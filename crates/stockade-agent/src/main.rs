//! The `stockade-agent` binary: parse the configuration, run the agent on a
//! current-thread runtime, exit with the main process's status.

use stockade_agent::config::Config;

fn main() {
    let config = match Config::parse(std::env::args().skip(1), |k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stockade-agent: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(8)
        .thread_keep_alive(std::time::Duration::from_secs(5))
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("stockade-agent: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(stockade_agent::agent::run(config));
    std::process::exit(code);
}
