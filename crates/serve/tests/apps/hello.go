// A small Go worker for scalpel-serve's tests: the same port and index contract as
// app.js, in another language. GET /healthz -> ok; GET / -> {"pid":..,"index":..,"lang":"go"}.
package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	port := os.Getenv("PORT")
	index := os.Getenv("WORKER_INDEX")
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	})
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		fmt.Fprintf(w, `{"pid":%d,"index":%q,"lang":"go"}`, os.Getpid(), index)
	})
	fmt.Printf("go worker %s listening on %s\n", index, port)
	if err := http.ListenAndServe("127.0.0.1:"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
