// An ordinary Go net/http service: it listens on $PORT (proxy mode). GET / answers who
// served it; GET /block?ms=N holds the request that long.
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"app": "go-port", "pid": os.Getpid()})
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, nil))
}
