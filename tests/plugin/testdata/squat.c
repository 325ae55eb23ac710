/*
 * squat: a hostile local user's listener. Binds 127.0.0.1:<port> for each
 * port given (retrying each for up to 30 s, as a user waiting for a freed
 * port would), creates <ready> once all are bound, then answers every
 * connection with an empty HTTP 200 (a health check's answer) and appends
 * whatever it was sent, up to 64 KiB per connection, to <log>. Runs until
 * killed.
 *
 * usage: squat <log> <ready> <port>...
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXP 8

int main(int argc, char **argv)
{
	struct pollfd pfd[MAXP];
	int n = argc - 3, logfd;

	if (argc < 4 || n > MAXP) {
		fprintf(stderr, "usage: squat <log> <ready> <port>...\n");
		return 2;
	}
	logfd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND, 0600);
	if (logfd < 0) {
		perror(argv[1]);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[3 + i])) };
		int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		for (int try = 0; bind(fd, (struct sockaddr *)&a, sizeof(a)); try++) {
			struct timespec ts = { 0, 10 * 1000 * 1000 };

			if (try > 3000) {
				fprintf(stderr, "bind %s: %s\n", argv[3 + i], strerror(errno));
				return 1;
			}
			nanosleep(&ts, NULL);
		}
		if (listen(fd, 64)) {
			perror("listen");
			return 1;
		}
		pfd[i].fd = fd;
		pfd[i].events = POLLIN;
	}
	close(open(argv[2], O_WRONLY | O_CREAT, 0644));
	for (;;) {
		if (poll(pfd, n, -1) < 0)
			continue;
		for (int i = 0; i < n; i++) {
			static char buf[65536];
			static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
			struct pollfd c;
			ssize_t got = 0, r;
			int cfd;

			if (!(pfd[i].revents & POLLIN))
				continue;
			cfd = accept(pfd[i].fd, NULL, NULL);
			if (cfd < 0)
				continue;
			c.fd = cfd;
			c.events = POLLIN;
			while (got < (ssize_t)sizeof(buf) && poll(&c, 1, 300) > 0 &&
			       (r = read(cfd, buf + got, sizeof(buf) - got)) > 0)
				got += r;
			if (got > 0 && write(logfd, buf, got) < 0)
				perror("log");
			if (write(cfd, ok, sizeof(ok) - 1) < 0)
				perror("answer");
			close(cfd);
		}
	}
}
