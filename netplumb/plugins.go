package netplumb

// LoopbackPlugin is the CNI plugin the runtime runs for every pod's lo,
// outside the network's conflist.
const LoopbackPlugin = "loopback"

// RequiredPlugins returns the CNI plugin binaries a node with network c
// needs: the conflist's chain (bridge, host-local, then portmap and
// bandwidth when enabled) and loopback. It only names them; FindPlugin
// looks for each.
func RequiredPlugins(c Config) []string {
	return append(pluginTypes(c), LoopbackPlugin)
}

// FindPlugin returns the path of the first executable regular file named
// name in dirs (DefaultBinDirs when nil), the check Install makes before it
// writes a conflist. A plugin in none of them is a *PluginNotFoundError.
// It only reads the file system.
func FindPlugin(name string, dirs []string) (string, error) {
	if dirs == nil {
		dirs = DefaultBinDirs
	}
	return findPlugin(name, dirs)
}
