# Sourced by bench-load.sh and bench-shards.sh: the baseline target, nginx with one worker
# answering every request with the 14-byte body "hello scalpel\n", on loopback.
# Needs free_port (scripts/lib/bench-basics.sh) and nginx installed.
#
# nginx_hello_start DIR: writes DIR/nginx.conf, starts nginx in the background with DIR as
# its prefix, and waits up to 5 s for an answer. Sets PORT and NGINX_PID. When nginx does
# not answer it is stopped, a line says so, and the function returns 1.
nginx_hello_start() {
  local dir="$1" nginx
  nginx="$(command -v nginx || echo /usr/sbin/nginx)"
  PORT="$(free_port)"
  cat >"$dir/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 75s;
  client_body_temp_path $dir; proxy_temp_path $dir; fastcgi_temp_path $dir;
  uwsgi_temp_path $dir; scgi_temp_path $dir;
  server {
    listen 127.0.0.1:$PORT;
    location / { default_type text/plain; return 200 "hello scalpel\n"; }
  }
}
CONF
  "$nginx" -c "$dir/nginx.conf" -p "$dir" &
  NGINX_PID=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/" >/dev/null && return 0; sleep 0.1; done
  kill "$NGINX_PID" 2>/dev/null
  echo "nginx did not start" >&2
  return 1
}
