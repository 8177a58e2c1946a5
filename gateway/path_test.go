package gateway

import (
	"net/url"
	"strings"
	"testing"
)

func TestCheckPath(t *testing.T) {
	good := []string{"/", "/v1/completions", "/v1/a%2Fb", "/a/...", "/a/.b", "/a/b.", "/%2e%2e%2e", "/a//b", "//x", "/a%20b", "/%C3%A9"}
	bad := map[string]error{
		"":                      errNotOriginForm,
		"*":                     errNotOriginForm,
		"http://x/":             errNotOriginForm,
		"/a/%zz":                errBadEscape,
		"/a%0":                  errBadEscape,
		"/a%":                   errBadEscape,
		"/a%00b":                errNUL,
		"/a/./b":                errDotSegment,
		"/..":                   errDotSegment,
		"/a/..":                 errDotSegment,
		"/v1/..%2Fadmin":        errDotSegment,
		"/v1/%2E%2E%2Fadmin":    errDotSegment,
		"/v1/x/..%2F..%2Fadmin": errDotSegment,
		"/v1/%2e%2e/admin":      errDotSegment,
		"/v1/%2e":               errDotSegment,
		"/v1/.%2e/x":            errDotSegment,
	}
	for _, p := range good {
		if err := checkPath(p); err != nil {
			t.Errorf("checkPath(%q) = %v, want nil", p, err)
		}
	}
	for p, want := range bad {
		if err := checkPath(p); err != want {
			t.Errorf("checkPath(%q) = %v, want %v", p, err, want)
		}
	}
}

func TestCheckPathAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { checkPath("/v1/a%2Fb/c%2e") }); n != 0 {
		t.Fatalf("checkPath allocates %v times", n)
	}
}

func TestSplitTarget(t *testing.T) {
	for _, c := range []struct {
		target, path, query string
		has                 bool
	}{
		{"/a", "/a", "", false}, {"/a?", "/a", "", true}, {"/a?x=%3F&y", "/a", "x=%3F&y", true}, {"/a?b?c", "/a", "b?c", true},
	} {
		p, q, h := splitTarget(c.target)
		if p != c.path || q != c.query || h != c.has {
			t.Errorf("splitTarget(%q) = %q, %q, %v", c.target, p, q, h)
		}
	}
}

// FuzzCheckPath compares checkPath with the rule written the plain way: decode, then look.
func FuzzCheckPath(f *testing.F) {
	for _, seed := range []string{"/", "/v1/..%2Fadmin", "/a%00", "/%2e%2E/x", "/a/%zz", "x", "/a/.../b", "/%"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := checkPath(raw)
		want := func() error {
			if !strings.HasPrefix(raw, "/") {
				return errNotOriginForm
			}
			decoded, err := url.PathUnescape(raw)
			if err != nil {
				return errBadEscape
			}
			if strings.IndexByte(decoded, 0) >= 0 {
				return errNUL
			}
			for _, segment := range strings.Split(decoded, "/") {
				if segment == "." || segment == ".." {
					return errDotSegment
				}
			}
			return nil
		}()
		// The scan stops at the first fault it meets; the plain rule looks in a fixed order.
		if (got == nil) != (want == nil) {
			t.Fatalf("checkPath(%q) = %v, the plain rule says %v", raw, got, want)
		}
	})
}
