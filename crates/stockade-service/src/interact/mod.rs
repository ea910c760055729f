pub mod agent;
pub mod exec;
pub mod log_cursor;
pub mod output;
pub mod processes;
pub mod terminal;
