/* test_prom.c - the Prometheus exposition (escaping, absent readings, GPU labels, the
 * training figures), listening addresses, and the endpoint answering raw HTTP. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "check.h"
#include "stoke/monitor.h"

static bool has(const char *text, const char *line) { return strstr(text, line) != NULL; }

static void test_escape(void)
{
    char buf[64];
    stoke_prom_escape("plain", buf, sizeof buf);
    CHECK(!strcmp(buf, "plain"));
    stoke_prom_escape("a\"b\\c\nd", buf, sizeof buf);
    CHECK(!strcmp(buf, "a\\\"b\\\\c\\nd"));
    /* cut short at a whole escape: never a lone backslash at the end */
    stoke_prom_escape("ab\"cd", buf, 4);
    CHECK(!strcmp(buf, "ab"));
    /* nor half a UTF-8 character (é is two bytes) */
    stoke_prom_escape("a\xc3\xa9", buf, 3);
    CHECK(!strcmp(buf, "a"));
    stoke_prom_escape("", buf, sizeof buf);
    CHECK(!strcmp(buf, ""));
}

static void fill_sample(stoke_mon_sample *s)
{
    memset(s, 0, sizeof *s);
    s->seq = 7;
    s->wall = 1700000000.5;
    s->valid = STOKE_MS_CPU | STOKE_MS_MEM | STOKE_MS_THREAD;
    s->cpu_pct = 50;
    s->iowait_pct = 2;
    s->ncpu = 8;
    s->mem_used_bytes = 1u << 30;
    s->mem_total_bytes = 4ull << 30;
    snprintf(s->busiest.comm, sizeof s->busiest.comm, "we\"ird\\");
    s->busiest.core_pct = 99;
    s->busy_threads = 3;
    s->gpu_count = 2;
    stoke_mon_gpu *g = &s->gpus[0];
    snprintf(g->name, sizeof g->name, "NVIDIA \"H200\"");
    snprintf(g->uuid, sizeof g->uuid, "GPU-0001");
    g->s.valid = STOKE_GS_UTIL | STOKE_GS_MEMORY | STOKE_GS_POWER | STOKE_GS_THROTTLE;
    g->s.util_gpu_pct = 85;
    g->s.util_mem_pct = 40;
    g->s.mem_used_bytes = 3ull << 20;
    g->s.mem_total_bytes = 10ull << 20;
    g->s.power_mw = 250500;
    g->s.throttle_reasons = 0x4;
    /* the second GPU has utilization only: its other readings are absent */
    g = &s->gpus[1];
    snprintf(g->name, sizeof g->name, "L4");
    g->s.valid = STOKE_GS_UTIL;
    g->s.util_gpu_pct = 10;
}

static void test_format(void)
{
    static char buf[1 << 16];
    stoke_mon_sample s;
    fill_sample(&s);
    size_t n = stoke_prom_format(&s, NULL, "monitor", buf, sizeof buf);
    CHECK(n > 0 && n == strlen(buf));
    CHECK(has(buf, "stoke_info{version=\"" STOKE_VERSION "\",command=\"monitor\"} 1\n"));
    CHECK(has(buf, "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"));
    CHECK(has(buf, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",uuid=\"GPU-0001\",name=\"NVIDIA \\\"H200\\\"\"} 85\n"));
    CHECK(has(buf, "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",uuid=\"\",name=\"L4\"} 10\n"));
    CHECK(has(buf, "DCGM_FI_DEV_FB_USED{gpu=\"0\",uuid=\"GPU-0001\",name=\"NVIDIA \\\"H200\\\"\"} 3\n"));
    CHECK(has(buf, "DCGM_FI_DEV_FB_FREE{gpu=\"0\",uuid=\"GPU-0001\",name=\"NVIDIA \\\"H200\\\"\"} 7\n"));
    CHECK(has(buf, "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",uuid=\"GPU-0001\",name=\"NVIDIA \\\"H200\\\"\"} 250.5\n"));
    CHECK(has(buf, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu=\"0\",uuid=\"GPU-0001\",name=\"NVIDIA \\\"H200\\\"\"} 4\n"));
    /* absent readings: no sample line, and no family at all when no GPU has one */
    CHECK(!has(buf, "DCGM_FI_DEV_POWER_USAGE{gpu=\"1\""));
    CHECK(!has(buf, "DCGM_FI_DEV_GPU_TEMP"));
    CHECK(!has(buf, "stoke_process_"  "resident"));
    CHECK(!has(buf, "stoke_input_"));
    CHECK(!has(buf, "stoke_train_"));
    CHECK(has(buf, "stoke_host_cpu_busy_ratio 0.5\n"));
    CHECK(has(buf, "stoke_host_memory_total_bytes 4294967296\n"));
    CHECK(has(buf, "stoke_monitor_samples_total 7\n"));
    CHECK(has(buf, "stoke_process_busiest_thread_cores{thread=\"we\\\"ird\\\\\"} 0.99\n"));

    /* training figures; NaN ones are left out */
    stoke_prom_train t = {.valid = true, .steps = 42, .epoch = 1, .epochs = 3,
                          .samples_per_s = 1000, .data_wait_ratio = 0.25, .loss = NAN,
                          .lr = 0.05, .mfu_ratio = NAN, .metric = 0.5, .metric_is_acc = true,
                          .val_loss = NAN, .val_metric = NAN,
                          .phase_ratio = {0.1, 0.3, 0.4, 0.1, NAN}, .elapsed_s = 3, .world = 1};
    n = stoke_prom_format(NULL, &t, "train", buf, sizeof buf);
    CHECK(n > 0);
    CHECK(has(buf, "# TYPE stoke_train_steps_total counter\nstoke_train_steps_total 42\n"));
    CHECK(has(buf, "stoke_train_phase_ratio{phase=\"backward\"} 0.4\n"));
    CHECK(!has(buf, "phase=\"allreduce\""));
    CHECK(!has(buf, "stoke_train_loss"));
    CHECK(!has(buf, "stoke_train_mfu_ratio"));
    CHECK(has(buf, "stoke_train_accuracy_ratio 0.5\n"));
    CHECK(!has(buf, "DCGM"));
    /* not a training run yet: no training family */
    t.valid = false;
    stoke_prom_format(NULL, &t, "train", buf, sizeof buf);
    CHECK(!has(buf, "stoke_train_"));

    /* too small a buffer: 0 and "" rather than a cut exposition */
    char small[100];
    CHECK(stoke_prom_format(&s, NULL, "monitor", small, sizeof small) == 0);
    CHECK(small[0] == '\0');
}

static void test_addr(void)
{
    stoke_prom_addr a;
    char buf[80];
    CHECK(stoke_prom_parse_addr("127.0.0.1:9400", &a) == STOKE_OK);
    CHECK(a.family == AF_INET && a.port == 9400 && a.loopback);
    CHECK(stoke_prom_parse_addr(":0", &a) == STOKE_OK);
    CHECK(a.family == AF_INET && a.port == 0 && a.loopback);
    stoke_prom_format_addr(&a, 123, buf, sizeof buf);
    CHECK(!strcmp(buf, "127.0.0.1:123"));
    CHECK(stoke_prom_parse_addr("localhost:80", &a) == STOKE_OK);
    CHECK(a.loopback && a.port == 80);
    CHECK(stoke_prom_parse_addr("[::1]:9400", &a) == STOKE_OK);
    CHECK(a.family == AF_INET6 && a.loopback);
    stoke_prom_format_addr(&a, 9400, buf, sizeof buf);
    CHECK(!strcmp(buf, "[::1]:9400"));
    CHECK(stoke_prom_parse_addr("127.1.2.3:1", &a) == STOKE_OK && a.loopback);
    CHECK(stoke_prom_parse_addr("0.0.0.0:9400", &a) == STOKE_OK && !a.loopback);
    CHECK(stoke_prom_parse_addr("[::]:9400", &a) == STOKE_OK && !a.loopback);
    CHECK(stoke_prom_parse_addr("10.1.2.3:9400", &a) == STOKE_OK && !a.loopback);
    const char *bad[] = {"9400", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                         "127.0.0.1:+5", "127.0.0.1:12x", "::1:9400", "[::1:9400",
                         "example.org:9400", "[nonsense]:1", "1.2.3:80"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(stoke_prom_parse_addr(bad[i], &a) == STOKE_ERR_ARG, "%s", bad[i]);
    CHECK(stoke_prom_parse_addr("example.org:9400", &a) == STOKE_ERR_ARG &&
          strstr(stoke_last_error(), "example.org"));
}

/* One request on a fresh connection; the whole response into buf. */
static size_t request(int port, const char *req, char *buf, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    size_t n = 0;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        write(fd, req, strlen(req)) == (ssize_t)strlen(req)) {
        ssize_t r;
        while (n + 1 < size && (r = read(fd, buf + n, size - 1 - n)) > 0)
            n += (size_t)r;
    }
    buf[n] = '\0';
    if (fd >= 0)
        close(fd);
    return n;
}

static void test_server(void)
{
    if (!stoke_prom_available()) {
        stoke_prom_server *p = NULL;
        CHECK(stoke_prom_start(":0", false, "test", &p) == STOKE_ERR_UNAVAILABLE);
        CHECK(strstr(stoke_last_error(), "libmicrohttpd"));
        return;
    }
    stoke_prom_server *p = NULL;
    CHECK(stoke_prom_start("0.0.0.0:0", false, "test", &p) == STOKE_ERR_ARG);
    CHECK(strstr(stoke_last_error(), "--prometheus-public"));
    CHECK(stoke_prom_start(":0", false, "test", &p) == STOKE_OK);
    if (!p)
        return;
    const char *url = stoke_prom_url(p);
    int port = 0;
    CHECK(sscanf(url, "http://127.0.0.1:%d/metrics", &port) == 1 && port > 0);

    /* the port taken: an error naming the address */
    char addr[40];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    stoke_prom_server *q = NULL;
    CHECK(stoke_prom_start(addr, false, "test", &q) == STOKE_ERR_IO);
    CHECK(strstr(stoke_last_error(), addr));
    stoke_prom_stop(q);

    stoke_mon_sample s;
    fill_sample(&s);
    stoke_prom_publish_sample(p, &s);
    static char buf[1 << 16];
    request(port, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof buf);
    CHECK(!strncmp(buf, "HTTP/1.", 7) && strstr(buf, " 200 "));
    CHECK(strstr(buf, "Content-Type: text/plain; version=0.0.4"));
    CHECK(strstr(buf, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""));
    request(port, "HEAD /metrics HTTP/1.0\r\n\r\n", buf, sizeof buf);
    CHECK(strstr(buf, " 200 ") && !strstr(buf, "DCGM_FI_DEV_GPU_UTIL{"));
    request(port, "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", buf, sizeof buf);
    CHECK(strstr(buf, " 405 ") && strstr(buf, "Allow: GET, HEAD"));
    request(port, "DELETE /metrics HTTP/1.0\r\n\r\n", buf, sizeof buf);
    CHECK(strstr(buf, " 405 "));
    request(port, "GET /other HTTP/1.0\r\n\r\n", buf, sizeof buf);
    CHECK(strstr(buf, " 404 "));
    request(port, "\x01\x02 garbage\r\n\r\n", buf, sizeof buf);
    CHECK(!strstr(buf, " 200 "));
    /* headers beyond the connection's memory are refused, not buffered */
    static char big[64 * 1024];
    int k = snprintf(big, sizeof big, "GET /metrics HTTP/1.0\r\nX-Big: ");
    memset(big + k, 'a', sizeof big - (size_t)k - 8);
    memcpy(big + sizeof big - 8, "\r\n\r\n", 5);
    request(port, big, buf, sizeof buf);
    CHECK(!strstr(buf, " 200 "));
    /* and still serving */
    request(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", buf,
            sizeof buf);
    CHECK(strstr(buf, " 200 "));
    stoke_prom_stop(p);
    stoke_prom_stop(NULL);
}

int main(void)
{
    test_escape();
    test_format();
    test_addr();
    test_server();
    return CHECK_DONE();
}
