# Source me. free_port: a TCP port that is free now, picked by the kernel
# (bind to port 0, read it back, let it go), for the few places that must
# know a port before anything listens on it: a sender started before its
# receiver, a port where nobody must listen, sshd (which cannot say which
# port it got). A program that can listen on port 0 and say which port it
# got (rdrecv PORT 0) is better: nothing can take the port in between.
# On Linux bind(0) takes ports of the other parity than connect() takes
# for its source ports: outgoing connections seldom take this one meanwhile.
free_port() {
	python3 -c 'import socket
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)   # v4 and v6, as rdrecv
s.bind(("::", 0))
print(s.getsockname()[1])' 2>/dev/null ||
	python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}
