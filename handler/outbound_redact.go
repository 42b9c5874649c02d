package handler

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Many webhook URLs are themselves the secret, or carry one: a Slack
// incoming webhook's path, a token in the query. Go's HTTP client quotes
// the whole URL into every transport error (a *url.Error: `Post
// "https://host/services/T/B/SECRET?token=…": EOF`), and such an error
// ends up in the entry's error, the run history, the console, the logs and
// the span status. So nothing shows more of a webhook URL than its scheme
// and host: RedactURL is that form, and redactError rewrites a try's error
// to it before anything reads the error.

// elided replaces what RedactURL drops.
const elided = "…"

// RedactURL is raw as it may be shown outside the manifest: scheme and host
// (with the port), then "/…" when there was a path, query or fragment to
// drop, so an operator still sees where a call went. User info is dropped
// too. A string that does not parse as an absolute URL is shown as "…".
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return elided
	}
	s := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawPath != "" || u.RawQuery != "" || u.ForceQuery ||
		u.Fragment != "" || u.Opaque != "" {
		return s + "/" + elided
	}
	return s + u.Path
}

// urlPattern finds what looks like an absolute URL in an error message: the
// client's own quote of the request's URL, a redirect's target, a URL an
// error of a custom CheckRedirect or transport echoes.
var urlPattern = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>\\]+`)

// redactedError is an error whose message has its URLs redacted; it keeps
// the original underneath for errors.Is and errors.As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactError returns err with every URL in its message in RedactURL's
// form and, in case a part of the configured URL appears on its own (an
// error quoting just the path, or the query), those parts replaced by "…".
// nil stays nil.
func redactError(err error, configured string) error {
	if err == nil {
		return nil
	}
	var msg string
	if ue, ok := err.(*url.Error); ok {
		// The client's own quote: its URL may be a redirect's Location,
		// relative to the configured URL, which the pattern below would not
		// see as a URL; resolved, it names the host it went to.
		target := ue.URL
		if base, err := url.Parse(configured); err == nil {
			if u, err := base.Parse(target); err == nil {
				target = u.String()
			}
		}
		msg = fmt.Sprintf("%s %q: %s", ue.Op, RedactURL(target), redactText(fmt.Sprint(ue.Err), configured))
	} else {
		msg = redactText(err.Error(), configured)
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// minSecretPart is the shortest path or query redactText looks for on its own.
const minSecretPart = 6

// redactText is redactError on a string.
func redactText(msg, configured string) string {
	msg = urlPattern.ReplaceAllStringFunc(msg, func(m string) string {
		// A URL quoted without quotes may run into the punctuation after it.
		trimmed := strings.TrimRight(m, ":,;.)]")
		return RedactURL(trimmed) + m[len(trimmed):]
	})
	u, err := url.Parse(configured)
	if err != nil {
		return msg
	}
	var parts []string
	if u.RawQuery != "" {
		parts = append(parts, u.RawQuery)
		if q, err := url.QueryUnescape(u.RawQuery); err == nil {
			parts = append(parts, q)
		}
	}
	if p := u.EscapedPath(); len(p) > 1 {
		parts = append(parts, p, u.Path)
	}
	for _, p := range parts {
		// Short parts are no secret, and replacing them would garble
		// unrelated words of the message.
		if len(p) >= minSecretPart {
			msg = strings.ReplaceAll(msg, p, elided)
		}
	}
	return msg
}
