package api

import (
	"net/http"
	"strings"
)

// router matches the SPEC's routes on the raw request path.
//
// SPEC "Matching rules" asks for exact matching on the path bytes as sent: no
// percent-decoding, no path cleaning, no trailing-slash redirect. The standard
// ServeMux decodes %XX inside wildcards and answers unclean paths (//, /./)
// with a 301, so it cannot keep that contract; this table does, and sets the
// {id} wildcard with Request.SetPathValue so handlers read it as usual.
type router struct {
	routes []route
}

type route struct {
	method   string
	segments []string // "{id}" matches one non-empty segment
	handler  http.HandlerFunc
}

const idWildcard = "{id}"

func (rt *router) handle(method, pattern string, h http.HandlerFunc) {
	rt.routes = append(rt.routes, route{method: method, segments: strings.Split(pattern, "/"), handler: h})
}

// match reports whether path fits the route and the raw {id} segment, if any.
func (ro route) match(segments []string) (id string, ok bool) {
	if len(segments) != len(ro.segments) {
		return "", false
	}
	for i, want := range ro.segments {
		switch {
		case want == idWildcard:
			if segments[i] == "" {
				return "", false
			}
			id = segments[i]
		case want != segments[i]:
			return "", false
		}
	}
	return id, true
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	segments := strings.Split(rawPath(r), "/")
	var allow []string
	for _, ro := range rt.routes {
		id, ok := ro.match(segments)
		if !ok {
			continue
		}
		if r.Method != ro.method {
			allow = append(allow, ro.method)
			continue
		}
		if id != "" {
			r.SetPathValue("id", id)
		}
		ro.handler(w, r)
		return
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, errMethodNotAllowed)
		return
	}
	writeError(w, errNotFound)
}

// rawPath is the request path exactly as the client sent it, before '?'.
func rawPath(r *http.Request) string {
	if strings.HasPrefix(r.RequestURI, "/") {
		path, _, _ := strings.Cut(r.RequestURI, "?")
		return path
	}
	// Absolute-form ("GET http://host/path") or a request built in-process.
	return r.URL.EscapedPath()
}
