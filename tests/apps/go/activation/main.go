// A Go service using the socket-activation convention (systemd's): when LISTEN_FDS=1 and
// LISTEN_PID is its own pid, it serves the listening socket on fd 3 and opens no port of
// its own (direct mode). Otherwise it listens on $PORT.
package main

import (
	"encoding/json"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
)

func listener() net.Listener {
	if os.Getenv("LISTEN_FDS") == "1" && os.Getenv("LISTEN_PID") == strconv.Itoa(os.Getpid()) {
		l, err := net.FileListener(os.NewFile(3, "listen"))
		if err != nil {
			log.Fatalf("fd 3: %v", err)
		}
		return l
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		log.Fatal(err)
	}
	return l
}

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"app": "go-activation", "pid": os.Getpid()})
	})
	log.Fatal(http.Serve(listener(), nil))
}
