/* null_epoll's work through io_uring: every recv and send is a submission, and one
 * io_uring_enter per loop submits them all and reaps the completions. Measures how much of
 * the per-request kernel cost is syscall crossings (see README.md). */
#define _GNU_SOURCE
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "reply.h"

#define MAX_FD 65536
#define BUF 4096
enum { ACCEPT = 0, RECV = 1, SEND = 2 };
static char *in[MAX_FD], *out[MAX_FD];
static struct io_uring ring;

static void submit(int fd, int kind, int len) {
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    if (!s) { io_uring_submit(&ring); s = io_uring_get_sqe(&ring); }
    if (kind == RECV) io_uring_prep_recv(s, fd, in[fd], BUF - 1, 0);
    else io_uring_prep_send(s, fd, out[fd], len, 0);
    io_uring_sqe_set_data64(s, ((unsigned long long)fd << 2) | kind);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s PORT\n", argv[0]); return 2; }
    int one = 1, ls = listen_on(atoi(argv[1]));
    if (ls < 0) return 1;
    struct io_uring_params p = {0};
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN;
    if (io_uring_queue_init_params(4096, &ring, &p) < 0) {
        struct io_uring_params plain = {0};
        if (io_uring_queue_init_params(4096, &ring, &plain) < 0) { perror("io_uring"); return 1; }
    }
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    io_uring_prep_multishot_accept(s, ls, NULL, NULL, 0);
    io_uring_sqe_set_data64(s, ACCEPT);
    for (;;) {
        io_uring_submit_and_wait(&ring, 1);
        struct io_uring_cqe *c;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, c) {
            seen++;
            unsigned long long d = c->user_data;
            int res = c->res, fd = (int)(d >> 2);
            if (d == ACCEPT) {
                if (res >= 0 && res < MAX_FD) {
                    setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    if (!in[res]) { in[res] = malloc(BUF); out[res] = malloc(2 * BUF); }
                    submit(res, RECV, 0);
                }
            } else if ((d & 3) == SEND) {
                submit(fd, RECV, 0);
            } else if (res <= 0) {
                close(fd);
            } else {
                submit(fd, SEND, answer(in[fd], res, out[fd]));
            }
        }
        io_uring_cq_advance(&ring, seen);
    }
}
