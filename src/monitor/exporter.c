/* exporter.c - the Prometheus endpoint: libmicrohttpd serving /metrics on a thread of
 * its own. The producers (the monitor's sampler, the training loop) only copy their
 * latest readings in under a lock held for that copy; each request renders from a copy
 * of its own, so a slow or hostile client never holds up training. Limits bound what
 * clients can take: connections, per-address connections, a per-connection memory pool
 * (huge headers are refused) and an idle timeout (slowloris). */
#include "stoke/monitor.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef STOKE_HAVE_MHD
#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* Limits: a scraper needs one connection; a few dozen leave room for several while a
 * flood of idle connections is closed after the timeout. */
enum {
    CONN_LIMIT = 32,
    PER_IP_LIMIT = 16,
    CONN_TIMEOUT_S = 5,
    CONN_MEMORY = 16 * 1024, /* request line + headers must fit: 16 KiB */
    BODY_SIZE = 256 * 1024,
};

struct stoke_prom_server {
    struct MHD_Daemon *d;
    char url[96];
    char command[16];
    pthread_mutex_t lock; /* guards the two snapshots below, for a memcpy at a time */
    bool have_sample;
    stoke_mon_sample sample;
    stoke_prom_train train;
};

/* What a request renders from: copied out under the lock, formatted outside it. */
typedef struct snapshot {
    char body[BODY_SIZE]; /* first: the response frees it, and so the whole snapshot */
    bool have_sample;
    stoke_mon_sample sample;
    stoke_prom_train train;
} snapshot;

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *text,
                             const char *allow)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload;
    stoke_prom_server *p = cls;
    bool get = !strcmp(method, MHD_HTTP_METHOD_GET), head = !strcmp(method, MHD_HTTP_METHOD_HEAD);
    /* The first call has the headers only; a request with a body (not ours to read)
     * is answered at once and its body discarded by the library. */
    if (*con_cls == NULL && (get || head)) {
        *con_cls = p;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        if (*con_cls)
            return MHD_YES;
    }
    if (strcmp(url, "/metrics"))
        return reply(c, MHD_HTTP_NOT_FOUND, "not found: stoke serves /metrics\n", NULL);
    if (!get && !head)
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed: GET or HEAD\n",
                     "GET, HEAD");
    snapshot *s = malloc(sizeof *s);
    if (!s)
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory\n", NULL);
    pthread_mutex_lock(&p->lock);
    s->have_sample = p->have_sample;
    if (p->have_sample)
        memcpy(&s->sample, &p->sample, sizeof s->sample);
    s->train = p->train;
    pthread_mutex_unlock(&p->lock);
    size_t n = stoke_prom_format(s->have_sample ? &s->sample : NULL, &s->train, p->command,
                                 s->body, sizeof s->body);
    struct MHD_Response *r =
        MHD_create_response_from_buffer_with_free_callback(n, s->body, free);
    if (!r) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static void quiet(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    (void)fmt;
    (void)ap;
}

bool stoke_prom_available(void) { return true; }

stoke_status stoke_prom_start(const char *text, bool allow_public, const char *command,
                              stoke_prom_server **out)
{
    *out = NULL;
    stoke_prom_addr a;
    stoke_status st = stoke_prom_parse_addr(text, &a);
    if (st != STOKE_OK)
        return st;
    char where[80];
    stoke_prom_format_addr(&a, a.port, where, sizeof where);
    if (!a.loopback && !allow_public)
        return stoke_fail(STOKE_ERR_ARG,
                          "--prometheus %s is not a loopback address: the metrics would be open "
                          "to the network; add --prometheus-public to serve them there",
                          where);
    int fd = socket(a.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return stoke_fail(STOKE_ERR_IO, "--prometheus %s: socket: %s", where, strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    if (a.family == AF_INET) {
        struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)a.port);
        memcpy(&v4->sin_addr, a.addr, 4);
        len = sizeof *v4;
    } else {
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)a.port);
        memcpy(&v6->sin6_addr, a.addr, 16);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        len = sizeof *v6;
    }
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        close(fd);
        return stoke_fail(STOKE_ERR_IO, "--prometheus %s: cannot listen there: %s%s", where,
                          strerror(e),
                          e == EADDRINUSE ? " (another program has the port: pick another, or "
                                            "port 0 for a free one)"
                                          : "");
    }
    len = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &len);
    int port = ntohs(a.family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                         : ((struct sockaddr_in6 *)&ss)->sin6_port);
    stoke_prom_server *p = calloc(1, sizeof *p);
    if (!p) {
        close(fd);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    }
    snprintf(p->command, sizeof p->command, "%s", command ? command : "");
    stoke_prom_format_addr(&a, port, where, sizeof where);
    snprintf(p->url, sizeof p->url, "http://%s/metrics", where);
    pthread_mutex_init(&p->lock, NULL);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ITC;
    if (a.family == AF_INET6)
        flags |= MHD_USE_IPv6;
    p->d = MHD_start_daemon(flags, 0, NULL, NULL, handle, p, MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONN_LIMIT,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)PER_IP_LIMIT,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
                            MHD_OPTION_EXTERNAL_LOGGER, quiet, NULL, MHD_OPTION_END);
    if (!p->d) { /* the socket may be closed or not by the library: left as it is */
        pthread_mutex_destroy(&p->lock);
        free(p);
        return stoke_fail(STOKE_ERR_SYSTEM, "--prometheus %s: libmicrohttpd could not start",
                          where);
    }
    *out = p;
    return STOKE_OK;
}

const char *stoke_prom_url(const stoke_prom_server *p) { return p ? p->url : ""; }

void stoke_prom_publish_sample(stoke_prom_server *p, const stoke_mon_sample *s)
{
    if (!p || !s)
        return;
    pthread_mutex_lock(&p->lock);
    memcpy(&p->sample, s, sizeof *s);
    p->have_sample = true;
    pthread_mutex_unlock(&p->lock);
}

void stoke_prom_publish_train(stoke_prom_server *p, const stoke_prom_train *t)
{
    if (!p || !t)
        return;
    pthread_mutex_lock(&p->lock);
    p->train = *t;
    pthread_mutex_unlock(&p->lock);
}

void stoke_prom_stop(stoke_prom_server *p)
{
    if (!p)
        return;
    /* Quiesced, the library hands the listening socket back instead of closing it;
     * where it cannot (-1), it closes it itself: closed once either way. */
    MHD_socket lfd = MHD_quiesce_daemon(p->d);
    MHD_stop_daemon(p->d);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

#else /* built without libmicrohttpd */

bool stoke_prom_available(void) { return false; }

stoke_status stoke_prom_start(const char *text, bool allow_public, const char *command,
                              stoke_prom_server **out)
{
    (void)text;
    (void)allow_public;
    (void)command;
    *out = NULL;
    return stoke_fail(STOKE_ERR_UNAVAILABLE,
                      "--prometheus: this stoke was built without libmicrohttpd; install it "
                      "(apt-get install libmicrohttpd-dev, or scripts/deps) and rebuild");
}

const char *stoke_prom_url(const stoke_prom_server *p)
{
    (void)p;
    return "";
}
void stoke_prom_publish_sample(stoke_prom_server *p, const stoke_mon_sample *s)
{
    (void)p;
    (void)s;
}
void stoke_prom_publish_train(stoke_prom_server *p, const stoke_prom_train *t)
{
    (void)p;
    (void)t;
}
void stoke_prom_stop(stoke_prom_server *p) { (void)p; }

#endif
