//! Operations on any container of the engine, a sandbox's or a helper's
//! (the agent volume's fill container, the disk probe). They sit below the
//! modules that make those containers, so each of them can clean up after
//! itself without reaching into another.

use std::time::Duration;

use bollard::container::{InspectContainerOptions, RemoveContainerOptions};
use bollard::errors::Error as BollardError;
use bollard::Docker;

use super::status_code;

/// Force-removes a container with its anonymous volumes (named volumes stay);
/// gone already is fine, and so is a removal already in progress (waited for).
pub(super) async fn remove_container(docker: &Docker, name: &str) -> Result<(), BollardError> {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        link: false,
    };
    match docker.remove_container(name, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if status_code(&e) == Some(404) => Ok(()),
        Err(BollardError::DockerResponseServerError {
            status_code: 409,
            message,
        }) if message.contains("already in progress") => {
            for _ in 0..50 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                match docker
                    .inspect_container(name, None::<InspectContainerOptions>)
                    .await
                {
                    Err(e) if status_code(&e) == Some(404) => return Ok(()),
                    Err(e) => return Err(e),
                    Ok(_) => {}
                }
            }
            Err(BollardError::DockerResponseServerError {
                status_code: 409,
                message,
            })
        }
        Err(e) => Err(e),
    }
}
