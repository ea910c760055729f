//! Request and response types of the HTTP API.
