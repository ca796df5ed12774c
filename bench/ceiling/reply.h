/* Shared by the ceiling servers: the listening socket and the fixed replies. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static int listen_on(int port) {
    int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1024)) { perror("listen"); return -1; }
    return ls;
}

/* Answers the whole requests in in[0..len): VALUE with 32 x's for every get (one key),
 * STORED for every set (its data block skipped). Returns the reply length in out. */
static int answer(char *in, int len, char *out) {
    in[len] = 0;
    int o = 0;
    char *p = in;
    while (p < in + len) {
        char *e = strstr(p, "\r\n");
        if (!e) break;
        *e = 0;
        if (!strncmp(p, "get ", 4)) {
            o += sprintf(out + o, "VALUE %s 0 32\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\nEND\r\n", p + 4);
            p = e + 2;
        } else if (!strncmp(p, "set ", 4)) {
            int bytes = 0;
            sscanf(p, "set %*s %*s %*s %d", &bytes);
            p = e + 2 + bytes + 2;
            o += sprintf(out + o, "STORED\r\n");
        } else {
            p = e + 2;
        }
    }
    return o;
}
