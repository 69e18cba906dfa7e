package serviceaccount

// WantsDefault exposes wantsDefault to the tests.
var WantsDefault = wantsDefault
