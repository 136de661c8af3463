// Package archtest holds the test that keeps the package layout of
// ARCHITECTURE.md true: each package of the module imports only the
// packages of ours that its row of the table allows. It has no code of its own.
package archtest
