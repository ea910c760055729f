pub mod agent;
pub mod code;
pub mod exec;
pub mod log_cursor;
pub mod output;
pub mod processes;
pub mod terminal;
