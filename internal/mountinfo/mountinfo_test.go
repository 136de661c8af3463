package mountinfo_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/internal/mountinfo"
)

func TestParseMountInfo(t *testing.T) {
	cases := []struct {
		name  string
		table string
		want  []mountinfo.Mount
		err   string
	}{
		{
			name:  "a line of proc(5)'s example",
			table: "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n",
			want:  []mountinfo.Mount{{ID: 36, ParentID: 35, Root: "/mnt1", MountPoint: "/mnt2", Options: "rw,noatime", FSType: "ext3", Source: "/dev/root"}},
		},
		{
			name:  "no optional fields, and escaped spaces, tabs and backslashes",
			table: "1 0 0:1 / /a\\040b\\011c\\134d rw - tmpfs none rw\n",
			want:  []mountinfo.Mount{{ID: 1, Root: "/", MountPoint: "/a b\tc\\d", Options: "rw", FSType: "tmpfs", Source: "none"}},
		},
		{
			name:  "several optional fields and blank lines",
			table: "\n2 1 0:2 / /x rw shared:1 master:2 propagate_from:3 - bind /src rw\n\n",
			want:  []mountinfo.Mount{{ID: 2, ParentID: 1, Root: "/", MountPoint: "/x", Options: "rw", FSType: "bind", Source: "/src"}},
		},
		{name: "too few fields", table: "1 0 0:1 / /x rw\n", err: "line 1"},
		{name: "no separator", table: "1 0 0:1 / /x rw a b c d\n", err: "separator"},
		{name: "a mount ID that is not a number", table: "x 0 0:1 / /x rw - t s rw\n", err: "mount ID"},
		{name: "a relative mount point", table: "1 0 0:1 / x rw - t s rw\n", err: "not absolute"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := mountinfo.Parse(strings.NewReader(c.table))
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

// FuzzParseMountInfo checks that no input makes the parser panic, and
// that every mount point it returns is absolute.
func FuzzParseMountInfo(f *testing.F) {
	f.Add("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n")
	f.Add("1 0 0:1 / /a\\040b rw - tmpfs none rw\n")
	f.Add("1 0 0:1 / /a\\7 rw - - - -\n")
	f.Fuzz(func(t *testing.T, table string) {
		mounts, err := mountinfo.Parse(strings.NewReader(table))
		if err != nil {
			return
		}
		for _, m := range mounts {
			if !strings.HasPrefix(m.MountPoint, "/") {
				t.Fatalf("mount point %q is not absolute", m.MountPoint)
			}
		}
	})
}

// TestTheKernelsOwnTableParses reads this process's mount table.
func TestTheKernelsOwnTableParses(t *testing.T) {
	mounts, err := mountinfo.PointsUnder(mountinfo.DefaultPath, "/")
	require.NoError(t, err)
	require.NotEmpty(t, mounts)
}
