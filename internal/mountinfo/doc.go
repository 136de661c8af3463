// Package mountinfo reads the kernel's mount table, /proc/<pid>/mountinfo
// (proc(5)), as Nomad's helper/mount does:
//
//	mounts, err := mountinfo.PointsUnder(mountinfo.DefaultPath, root)
//
// PointsUnder gives the mount points at or below a directory; Parse gives
// every line of a table, its paths unescaped.
package mountinfo
