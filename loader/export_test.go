package loader

// WithMapEntries returns opts with the max_entries of the named maps
// replaced, so that a test can fill a map with a few cgroups.
func WithMapEntries(opts Options, entries map[string]uint32) Options {
	opts.mapEntries = entries
	return opts
}
