package unenforced

// HasSynced reports whether the informers have listed, for the tests: objects created before
// that get no event.
func (c *Controller) HasSynced() bool {
	for _, synced := range c.synced {
		if !synced() {
			return false
		}
	}
	return true
}
