// Dashboard tests (UI-1..UI-10) in real headless Chromium, against a real
// Stockade server binary and the real Docker engine. One server and one
// browser for the whole run (lib/harness.mjs); each suite file holds the
// tests of one part of the dashboard.
import './lib/harness.mjs';
import './suite/basics.mjs';
