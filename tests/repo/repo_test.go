// Package repo holds tests of the repository as a whole: its documents,
// its layout and the rules every package keeps.
package repo

// root is the repository's top, seen from this package.
const root = "../../"
