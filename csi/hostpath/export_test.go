package hostpath

// LockVolume takes volume id's lock, as a node RPC on it does, and returns
// the function that releases it.
func LockVolume(d *Driver, id string) (unlock func()) { return d.volumes.lock(id) }
