// Package testheads reads payments/testdata/request-heads.txt, the table of
// request heads that both payments services are tested against (SPEC "Request
// heads"): the Rust service's unit tests and the cross-service test read the
// same file.
package testheads

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// ID is the user id that {id} stands for unless Load is told another.
const ID = "u0123456789ab"

// Case is one line of the table.
type Case struct {
	Line   int    // line number in the file
	Status int    // 0: the head is passed on
	Code   string // the JSON error code when Status != 0
	Raw    []byte // the request bytes
}

// Path is payments/testdata/request-heads.txt, found from this source file.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "request-heads.txt")
}

// Load reads the table with {id} standing for id.
func Load(t testing.TB, id string) []Case {
	t.Helper()
	raw, err := os.ReadFile(Path())
	if err != nil {
		t.Fatal(err)
	}
	var cases []Case
	for n, line := range strings.Split(string(raw), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		expect, request, ok := strings.Cut(line, " | ")
		if !ok {
			t.Fatalf("%s:%d: want EXPECT | REQUEST", Path(), n+1)
		}
		c := Case{Line: n + 1, Raw: decode(t, request, id)}
		if expect != "pass" {
			status, code, _ := strings.Cut(expect, " ")
			c.Status, _ = strconv.Atoi(status)
			c.Code = code
		}
		cases = append(cases, c)
	}
	if len(cases) < 100 {
		t.Fatalf("%s has %d cases", Path(), len(cases))
	}
	return cases
}

// decode reads the request notation: \r \n \t \\ \xHH, {id}, {N*TEXT}.
func decode(t testing.TB, text, id string) []byte {
	var out []byte
	for i := 0; i < len(text); {
		switch text[i] {
		case '\\':
			switch text[i+1] {
			case 'r':
				out = append(out, '\r')
			case 'n':
				out = append(out, '\n')
			case 't':
				out = append(out, '\t')
			case '\\':
				out = append(out, '\\')
			case 'x':
				b, err := strconv.ParseUint(text[i+2:i+4], 16, 8)
				if err != nil {
					t.Fatalf("bad \\x in %q", text)
				}
				out = append(out, byte(b))
				i += 2
			default:
				t.Fatalf("unknown escape in %q", text)
			}
			i += 2
		case '{':
			end := i + strings.IndexByte(text[i:], '}')
			inner := text[i+1 : end]
			if inner == "id" {
				out = append(out, id...)
			} else {
				n, what, ok := strings.Cut(inner, "*")
				count, err := strconv.Atoi(n)
				if !ok || err != nil {
					t.Fatalf("bad {N*TEXT} in %q", text)
				}
				out = append(out, bytes.Repeat(decode(t, what, id), count)...)
			}
			i = end + 1
		default:
			out = append(out, text[i])
			i++
		}
	}
	return out
}
