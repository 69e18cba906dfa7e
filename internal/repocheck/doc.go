// Package repocheck holds tests of rules that span the whole repository rather than one
// package, such as "nothing under test/ is built into a binary".
package repocheck
