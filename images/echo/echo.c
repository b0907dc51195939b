/* Backends for Rivora's test cluster and Kubernetes demo: the lab's identity protocol
 * (crates/lab/src/traffic.rs, IdentityServer) served from a Pod, so the lab's clients, rounds and
 * long-lived streams measure Pods exactly as they measure namespace backends.
 *
 *   TCP: on accept, "NAME PEER\n", then every byte received is echoed until the peer closes.
 *   UDP: each datagram gets "NAME PEER PAYLOAD" back.
 * NAME is $POD_NAME (else the host name); PEER is the client address as the Pod saw it, written
 * as Rust writes a SocketAddr ("10.0.0.1:4000", "[fd00::1]:4000"), so SNAT is visible.
 *
 * Termination, as a well-behaved service with a preStop sleep does it: after SIGTERM it keeps
 * accepting for DRAIN seconds ($DRAIN_SECONDS, default 5: the time the endpoint change needs to
 * reach every load balancer), then closes its listeners and exits once its last TCP connection
 * has closed (UDP is answered until then). The kubelet's SIGKILL at the end of the grace period
 * is the bound.
 *
 * Usage: echo [PORT]   (default 8080; TCP and UDP, IPv4 and IPv6). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 4096
#define BUF 65536

static volatile sig_atomic_t terminating;
static char name[256];

static void on_term(int sig) {
	(void)sig;
	terminating = 1;
}

static void fmt_peer(const struct sockaddr_storage *ss, char *out, size_t len) {
	char ip[INET6_ADDRSTRLEN] = "?";
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)ss;
		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
		snprintf(out, len, "%s:%u", ip, ntohs(a->sin_port));
	} else {
		const struct sockaddr_in6 *a = (const void *)ss;
		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
		snprintf(out, len, "[%s]:%u", ip, ntohs(a->sin6_port));
	}
}

static int bind_socket(int family, int type, unsigned port) {
	int fd = socket(family, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	if (family == AF_INET) {
		struct sockaddr_in *a = (void *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		sl = sizeof *a;
	} else {
		struct sockaddr_in6 *a = (void *)&ss;
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		sl = sizeof *a;
	}
	if (bind(fd, (void *)&ss, sl) < 0 || (type == SOCK_STREAM && listen(fd, 1024) < 0)) {
		close(fd);
		return -1;
	}
	return fd;
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void answer_udp(int fd, char *buf) {
	struct sockaddr_storage peer;
	socklen_t pl = sizeof peer;
	char head[300], p[80];
	ssize_t n = recvfrom(fd, buf, BUF, MSG_DONTWAIT, (void *)&peer, &pl);
	if (n < 0)
		return;
	fmt_peer(&peer, p, sizeof p);
	int h = snprintf(head, sizeof head, "%s %s ", name, p);
	struct iovec iov[2] = {{head, (size_t)h}, {buf, (size_t)n}};
	struct msghdr msg = {.msg_name = &peer, .msg_namelen = pl, .msg_iov = iov, .msg_iovlen = 2};
	sendmsg(fd, &msg, MSG_DONTWAIT);
}

static int write_all(int fd, const char *p, size_t n) {
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int main(int argc, char **argv) {
	unsigned port = argc > 1 ? (unsigned)atoi(argv[1]) : 8080;
	const char *env = getenv("POD_NAME");
	if (env && *env)
		snprintf(name, sizeof name, "%s", env);
	else if (gethostname(name, sizeof name) < 0)
		snprintf(name, sizeof name, "echo");
	for (char *c = name; *c; c++)
		if (*c == ' ')
			*c = '-';
	double drain = getenv("DRAIN_SECONDS") ? atof(getenv("DRAIN_SECONDS")) : 5.0;
	struct sigaction sa = {.sa_handler = on_term};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* Slots 0-3: TCP v4, TCP v6, UDP v4, UDP v6 listeners; then connections. */
	static struct pollfd fds[4 + MAX_CONNS];
	int families[2] = {AF_INET, AF_INET6};
	int listening = 0;
	for (int i = 0; i < 4; i++) {
		fds[i].fd = bind_socket(families[i % 2], i < 2 ? SOCK_STREAM : SOCK_DGRAM, port);
		fds[i].events = POLLIN;
		if (fds[i].fd >= 0 && i < 2)
			listening++;
	}
	if (listening == 0) {
		fprintf(stderr, "echo: cannot listen on TCP port %u: %s\n", port, strerror(errno));
		return 1;
	}
	fprintf(stderr, "echo: %s serving TCP and UDP on port %u\n", name, port);
	int nconn = 0;
	double term_at = 0;
	static char buf[BUF];
	for (;;) {
		if (terminating && term_at == 0) {
			term_at = now();
			fprintf(stderr, "echo: SIGTERM: accepting for %.1f s more, then draining %d connections\n",
				drain, nconn);
		}
		if (term_at > 0 && listening && now() - term_at >= drain) {
			for (int i = 0; i < 2; i++)
				if (fds[i].fd >= 0) {
					close(fds[i].fd);
					fds[i].fd = -1;
				}
			listening = 0;
		}
		if (term_at > 0 && !listening && nconn == 0) {
			fprintf(stderr, "echo: drained, exiting\n");
			return 0;
		}
		int r = poll(fds, 4 + (nfds_t)nconn, 200);
		if (r < 0 && errno != EINTR) {
			perror("echo: poll");
			return 1;
		}
		if (r <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			if (fds[i].fd < 0 || !(fds[i].revents & POLLIN))
				continue;
			struct sockaddr_storage peer;
			socklen_t pl = sizeof peer;
			int c = accept4(fds[i].fd, (void *)&peer, &pl, SOCK_CLOEXEC);
			if (c < 0)
				continue;
			char p[80], line[400];
			fmt_peer(&peer, p, sizeof p);
			int n = snprintf(line, sizeof line, "%s %s\n", name, p);
			if (nconn == MAX_CONNS || write_all(c, line, (size_t)n) < 0) {
				close(c);
				continue;
			}
			fds[4 + nconn].fd = c;
			fds[4 + nconn].events = POLLIN;
			fds[4 + nconn].revents = 0;
			nconn++;
		}
		for (int i = 2; i < 4; i++)
			if (fds[i].fd >= 0 && (fds[i].revents & POLLIN))
				answer_udp(fds[i].fd, buf);
		for (int i = 4; i < 4 + nconn;) {
			if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
				ssize_t n = read(fds[i].fd, buf, sizeof buf);
				if (n <= 0 || write_all(fds[i].fd, buf, (size_t)n) < 0) {
					close(fds[i].fd);
					fds[i] = fds[4 + nconn - 1];
					nconn--;
					continue;
				}
			}
			i++;
		}
	}
}
