package core

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// defaultPorts are the ports a URL of each accepted scheme has when it names none.
var defaultPorts = map[string]string{"http": "80", "https": "443"}

// NormalizeWorkerURL returns the form of a worker URL that the router keeps, hashes onto the
// ring and reports: scheme and host in lower case, no default port, no trailing "/". A URL
// already in that form is returned unchanged, so its keys land where they always did. An error
// names the URL and the rule it breaks (contract: "Workers and membership").
func NormalizeWorkerURL(raw string) (string, error) {
	if err := checkWorkerURLText(raw); err != nil {
		return "", err
	}
	u, err := url.Parse(raw)
	if err != nil {
		var parseErr *url.Error
		if errors.As(err, &parseErr) {
			err = parseErr.Err
		}
		return "", invalid("worker URL %q is not a URL: %v", raw, err)
	}
	if err := checkWorkerURLParts(raw, u); err != nil {
		return "", err
	}
	host := strings.ToLower(u.Host)
	if port := u.Port(); port == "" || port == defaultPorts[u.Scheme] {
		host = strings.TrimSuffix(strings.TrimSuffix(host, port), ":")
	}
	return u.Scheme + "://" + host + strings.TrimRight(u.EscapedPath(), "/"), nil
}

// checkWorkerURLText refuses what must be caught before parsing: an empty URL, bytes that are
// not UTF-8, a comma (a comma-separated list given as one URL) and a missing "scheme://".
func checkWorkerURLText(raw string) error {
	switch {
	case raw == "":
		return invalid("worker URL must not be empty")
	case !utf8.ValidString(raw):
		return invalid("worker URL %q is not valid UTF-8", raw)
	case strings.Contains(raw, ","):
		return invalid("worker URL %q contains a comma: give each worker as a URL of its own, not a comma-separated list", raw)
	case !strings.Contains(raw, "://"):
		return invalid("worker URL %q has no scheme: write it as http://%s or https://%s", raw, raw, raw)
	}
	return nil
}

// checkWorkerURLParts refuses a parsed URL that does not name an HTTP server: another scheme,
// no host, a port out of range, user info, a query or a fragment.
func checkWorkerURLParts(raw string, u *url.URL) error {
	switch {
	case defaultPorts[u.Scheme] == "":
		return invalid("worker URL %q: the scheme must be http or https, not %q", raw, u.Scheme)
	case u.Hostname() == "":
		return invalid("worker URL %q has no host", raw)
	case u.User != nil:
		return invalid("worker URL %q must not contain user info (user@ or user:password@)", raw)
	case u.RawQuery != "" || u.ForceQuery:
		return invalid("worker URL %q must not have a query (?...)", raw)
	case strings.Contains(raw, "#"):
		return invalid("worker URL %q must not have a fragment (#...)", raw)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return invalid("worker URL %q: the port must be from 1 to 65535, not %s", raw, port)
		}
	}
	return nil
}

// normalizeWorkerURLs normalises each URL and refuses a list that names a worker twice, in the
// same form or in two that normalise alike.
func normalizeWorkerURLs(urls []string) ([]string, error) {
	normal := make([]string, len(urls))
	seen := make(map[string]string, len(urls))
	for i, raw := range urls {
		n, err := NormalizeWorkerURL(raw)
		if err != nil {
			return nil, err
		}
		if first, dup := seen[n]; dup {
			return nil, duplicateWorker(first, raw, n)
		}
		seen[n], normal[i] = raw, n
	}
	return normal, nil
}

func duplicateWorker(first, raw, normal string) error {
	if first == raw {
		return fmt.Errorf("%w: worker URL %q is listed twice", ErrDuplicateWorker, raw)
	}
	return fmt.Errorf("%w: worker URLs %q and %q are the same worker, %s", ErrDuplicateWorker, first, raw, normal)
}

// memberURL is the form of url a member would have, for looking a member up; a URL that cannot
// be normalised is looked up as given, so it is reported as an unknown worker.
func memberURL(url string) string {
	if n, err := NormalizeWorkerURL(url); err == nil {
		return n
	}
	return url
}
