/* A memcached stand-in that does no work: epoll, one recv and one send per request.
 * Measures the per-request cost no server can avoid on this path (see README.md).
 * Assumes every read holds whole requests (true for workload a only). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "reply.h"

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s PORT\n", argv[0]); return 2; }
    int one = 1, ls = listen_on(atoi(argv[1]));
    if (ls < 0) return 1;
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    static struct epoll_event evs[1024];
    static char in[65536], out[65536];
    for (;;) {
        int n = epoll_wait(ep, evs, 1024, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c = accept4(ls, NULL, NULL, SOCK_NONBLOCK);
                if (c < 0) continue;
                setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                struct epoll_event e = {.events = EPOLLIN | EPOLLET, .data.fd = c};
                epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
                continue;
            }
            ssize_t r = recv(fd, in, sizeof in - 1, 0);
            if (r == 0) { close(fd); continue; }
            if (r < 0) continue;
            int o = answer(in, (int)r, out);
            if (o > 0) send(fd, out, o, 0);
        }
    }
}
