# Sourced by the bench scripts: what each of them prints and needs before measuring.
#
# load1: the 1-minute load average, printed beside every figure (the machine is shared).
# machine_line: the "# machine: …" heading line (cpus, model, kernel, time).
# free_port: a free TCP port on 127.0.0.1, for a server the bench starts.
load1() { cut -d' ' -f1 /proc/loadavg; }

machine_line() {
  echo "# machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
