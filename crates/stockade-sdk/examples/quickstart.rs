//! The smallest complete program on the Rust SDK (the README's): create a
//! sandbox, run a command in it, print its output, delete it.

use stockade_sdk::{Client, CreateParams, Sandbox};

#[tokio::main]
async fn main() -> Result<(), stockade_sdk::Error> {
    let client = Client::from_env()?; // STOCKADE_URL, STOCKADE_TOKEN
    let sandbox = Sandbox::create(&client, CreateParams::new().name("sdk-hello")).await?;
    let out = sandbox.run_command("echo hello from the Rust SDK").await?;
    print!("{}", out.stdout);
    sandbox.delete().await?;
    Ok(())
}
