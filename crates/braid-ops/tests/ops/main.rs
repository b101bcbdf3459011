//! braid-ops' integration tests, in one binary: status, metrics and the dashboard in a real
//! headless browser.

mod browser;
mod rig;

mod dashboard;
mod metrics;
mod status;
