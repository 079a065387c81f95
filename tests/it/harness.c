/*
 * harness.c - shared helpers of the integration tests (see harness.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <mysql.h>

#include "cmd/config.h"
#include "tests/it/harness.h"

extern char **environ;

static bool it_initialised;

void it_init(void)
{
    struct rlimit rl;

    if (it_initialised)
        return;
    it_initialised = true;
    /* The concurrency test holds > 1024 sockets at once. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            fprintf(stderr, "harness: setrlimit(NOFILE): %s\n",
                    strerror(errno));
    }
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "harness: curl_global_init failed\n");
        abort();
    }
}

const char *it_bin(void)
{
    const char *bin = getenv("SECKILL_BIN");

    return bin && *bin ? bin : "build/seckilld";
}

static void it_mkdir_p(const char *path)
{
    char buf[IT_PATH_MAX];
    size_t i;

    snprintf(buf, sizeof(buf), "%s", path);
    for (i = 1; buf[i]; i++) {
        if (buf[i] == '/') {
            buf[i] = '\0';
            mkdir(buf, 0755);
            buf[i] = '/';
        }
    }
    mkdir(buf, 0755);
}

const char *it_log_dir(void)
{
    static char dir[IT_PATH_MAX];
    const char *env, *bin, *slash;

    if (dir[0])
        return dir;
    env = getenv("SECKILL_IT_LOGDIR");
    if (env && *env) {
        snprintf(dir, sizeof(dir), "%s", env);
    } else {
        bin = it_bin();
        slash = strrchr(bin, '/');
        if (slash)
            snprintf(dir, sizeof(dir), "%.*s/it-logs", (int)(slash - bin), bin);
        else
            snprintf(dir, sizeof(dir), "it-logs");
    }
    it_mkdir_p(dir);
    return dir;
}

uint16_t it_free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    uint16_t port = 0;
    int fd;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* ---- processes ---- */

/* What a child of it_spawn() or it_spawn_ns() runs, and how. */
struct it_child {
    char *const *argv;
    char *const *envp;
    const char *log_path;
    /* Its host name (in a UTS namespace of its own), or NULL: as ours. */
    const char *hostname;
    /* The test process, checked for having died before the child asked
     * to die with it; 0 when the child cannot see it (a PID namespace of
     * its own), and only asks. */
    pid_t parent;
};

/* The child's side: never returns. */
static int it_child_main(void *arg)
{
    const struct it_child *c = arg;
    sigset_t none;
    int fd;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (c->parent && getppid() != c->parent)
        _exit(127);
    signal(SIGPIPE, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    fd = open(c->log_path ? c->log_path : "/dev/null",
              O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
    }
    fd = open("/dev/null", O_RDONLY);
    if (fd >= 0)
        dup2(fd, STDIN_FILENO);
    if (c->hostname && sethostname(c->hostname, strlen(c->hostname)) != 0) {
        fprintf(stderr, "harness: sethostname %s: %s\n", c->hostname,
                strerror(errno));
        _exit(127);
    }
    execve(c->argv[0], c->argv, c->envp ? c->envp : environ);
    fprintf(stderr, "harness: exec %s: %s\n", c->argv[0], strerror(errno));
    _exit(127);
}

pid_t it_spawn(char *const argv[], char *const envp[], const char *log_path)
{
    struct it_child c = {argv, envp, log_path, NULL, getpid()};
    pid_t pid;

    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "harness: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0)
        it_child_main(&c);
    return pid;
}

/* The stack a namespaced child starts on, until its exec. */
#define IT_CHILD_STACK (256 * 1024)

pid_t it_spawn_ns(char *const argv[], char *const envp[], const char *log_path,
                  const char *hostname)
{
    struct it_child c = {argv, envp, log_path, hostname, 0};
    char *stack = xmalloc(IT_CHILD_STACK);
    pid_t pid;

    fflush(NULL);
    /* Not CLONE_VM: the child has its own copy of memory, stack too. */
    pid = clone(it_child_main, stack + IT_CHILD_STACK,
                CLONE_NEWUTS | CLONE_NEWPID | SIGCHLD, &c);
    free(stack);
    if (pid < 0)
        fprintf(stderr, "harness: clone (new UTS and PID namespaces): %s\n",
                strerror(errno));
    return pid;
}

bool it_ns_available(void)
{
    static int known; /* 1 yes, -1 no, 0 not asked yet */
    char *argv[] = {"/bin/true", NULL};
    int status;

    if (!known) {
        pid_t pid = it_spawn_ns(argv, NULL, NULL, "it-ns-probe");

        known = pid > 0 && waitpid(pid, &status, 0) == pid &&
                        WIFEXITED(status) && WEXITSTATUS(status) == 0
                    ? 1
                    : -1;
    }
    return known > 0;
}

int it_wait_exit(pid_t pid, int timeout_ms, int *status)
{
    int64_t deadline = util_mono_ms() + timeout_ms;
    pid_t r;

    for (;;) {
        r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 0;
        if (r < 0 && errno != EINTR)
            return -ECHILD;
        if (util_mono_ms() >= deadline)
            return -ETIMEDOUT;
        usleep(10 * 1000);
    }
}

int it_run_capture(char *const argv[], char **out)
{
    size_t cap = 4096, len = 0;
    char *buf = xmalloc(cap);
    int64_t deadline = util_mono_ms() + 30000;
    int pipefd[2];
    int status = -1;
    pid_t pid;

    *out = NULL;
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        free(buf);
        return -1;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        free(buf);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGPIPE, SIG_DFL);
        dup2(pipefd[1], STDOUT_FILENO);
        execv(argv[0], argv);
        fprintf(stderr, "harness: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pipefd[1]);
    for (;;) {
        struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
        int64_t left = deadline - util_mono_ms();
        ssize_t n;

        if (left <= 0 || poll(&pfd, 1, (int)left) == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            close(pipefd[0]);
            free(buf);
            fprintf(stderr, "harness: %s timed out\n", argv[0]);
            return -1;
        }
        if (len + 1024 > cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        n = read(pipefd[0], buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(pipefd[0]);
    buf[len] = '\0';
    if (waitpid(pid, &status, 0) != pid)
        status = -1;
    *out = buf;
    return status;
}

int it_wait_tcp(uint16_t port, int timeout_ms)
{
    int64_t deadline = util_mono_ms() + timeout_ms;
    struct sockaddr_in sa;
    int fd, rc;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(port);
    for (;;) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
        rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
        close(fd);
        if (rc == 0)
            return 0;
        if (util_mono_ms() >= deadline)
            return -ETIMEDOUT;
        usleep(20 * 1000);
    }
}

size_t it_proc_tcp_ports(pid_t pid, uint16_t remote_port, uint16_t *out,
                         size_t max)
{
    unsigned long inodes[1024];
    size_t n_inodes = 0, n = 0, i;
    char path[64], link[64], line[512];
    struct dirent *de;
    DIR *dir;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    dir = opendir(path);
    if (!dir)
        return 0;
    while ((de = readdir(dir)) && n_inodes < 1024) {
        char fd_path[128];
        ssize_t len;

        if (snprintf(fd_path, sizeof(fd_path), "%s/%s", path, de->d_name) >=
            (int)sizeof(fd_path))
            continue;
        len = readlink(fd_path, link, sizeof(link) - 1);
        if (len <= 0)
            continue;
        link[len] = '\0';
        if (sscanf(link, "socket:[%lu]", &inodes[n_inodes]) == 1)
            n_inodes++;
    }
    closedir(dir);

    snprintf(path, sizeof(path), "/proc/%d/net/tcp", (int)pid);
    f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned lport, rport, state;
        unsigned long inode;

        /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
        if (sscanf(line,
                   " %*u: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%x %x %*s %*s %*s "
                   "%*u %*u %lu",
                   &lport, &rport, &state, &inode) != 4)
            continue;
        if (rport != remote_port || state != 1 /* ESTABLISHED */)
            continue;
        for (i = 0; i < n_inodes; i++) {
            if (inodes[i] == inode) {
                if (n < max)
                    out[n] = (uint16_t)lport;
                n++;
                break;
            }
        }
    }
    fclose(f);
    return n;
}

/* ---- raw sockets ---- */

int it_raw_connect(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        print_error("connect to port %u: %s\n", (unsigned)port,
                    strerror(errno));
        close(fd);
        fail();
    }
    return fd;
}

/* Send all of s; false if the peer has closed. */
bool it_raw_send(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        s += w;
        n -= (size_t)w;
    }
    return true;
}

bool it_raw_send_str(int fd, const char *s)
{
    return it_raw_send(fd, s, strlen(s));
}

/*
 * Read from fd until the peer closes (EOF or reset) or timeout_ms passes.
 * Returns true if it closed. The data read so far goes to *out when out is
 * not NULL (NUL-terminated; free(3) it).
 */
bool it_raw_read_to_close(int fd, int timeout_ms, char **out)
{
    int64_t deadline = util_mono_ms() + timeout_ms;
    size_t len = 0, cap = 4096;
    char *buf = xmalloc(cap);
    bool closed = false;

    for (;;) {
        int64_t left = deadline - util_mono_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};

        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        if (len + 1024 > cap)
            buf = xrealloc(buf, cap *= 2);
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            closed = true;
            break;
        }
        len += (size_t)r;
    }
    buf[len] = '\0';
    if (out)
        *out = buf;
    else
        free(buf);
    return closed;
}

/* Send request (complete, with "Connection: close") and read the answer. */
void it_raw_request(uint16_t port, const char *request, size_t len,
                    int timeout_ms, struct it_raw_resp *resp)
{
    int fd = it_raw_connect(port);

    memset(resp, 0, sizeof(*resp));
    it_raw_send(fd, request, len);
    resp->closed = it_raw_read_to_close(fd, timeout_ms, &resp->text);
    close(fd);
    if (sscanf(resp->text, "HTTP/1.%*d %ld", &resp->status) != 1)
        resp->status = 0;
    resp->body = strstr(resp->text, "\r\n\r\n");
    resp->body = resp->body ? resp->body + 4 : "";
    resp->json = json_loads(resp->body, 0, NULL);
}

void it_raw_resp_free(struct it_raw_resp *resp)
{
    free(resp->text);
    json_decref(resp->json);
    memset(resp, 0, sizeof(*resp));
}

/* Assert a raw answer is the JSON error status/code. */
void it_raw_assert_error(const struct it_raw_resp *resp, long status,
                         const char *code)
{
    const char *got = it_json_str(json_object_get(resp->json, "error"), "code");

    if (resp->status != status || !got || strcmp(got, code) != 0) {
        print_error("expected %ld %s, got:\n%.600s\n", status, code,
                    resp->text);
        fail();
    }
    if (!strstr(resp->text, "Content-Type: application/json")) {
        print_error("not JSON:\n%.600s\n", resp->text);
        fail();
    }
}

/* ---- seckilld ---- */

char **it_env_build(const char *const *overrides)
{
    size_t n = 0, m = 0, i, j, k = 0;
    char **env;

    while (environ[n])
        n++;
    while (overrides && overrides[m])
        m++;
    env = xcalloc(n + m + 1, sizeof(*env));
    for (i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t name_len = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        bool replaced = false;

        for (j = 0; j < m; j++) {
            const char *o = overrides[j];
            size_t olen = strcspn(o, "=");

            if (olen == name_len && strncmp(o, environ[i], olen) == 0)
                replaced = true;
        }
        if (!replaced)
            env[k++] = xstrdup(environ[i]);
    }
    for (j = 0; j < m; j++)
        if (strchr(overrides[j], '='))
            env[k++] = xstrdup(overrides[j]);
    env[k] = NULL;
    return env;
}

void it_env_free(char **env)
{
    size_t i;

    for (i = 0; env[i]; i++)
        free(env[i]);
    free(env);
}

/* GET /healthz with a short timeout; returns the status or 0. */
static long it_healthz(const struct it_server *srv)
{
    struct it_req req = {.method = "GET", .path = "/healthz", .timeout_s = 2};
    struct it_resp resp;
    long status;

    status = it_http_do(srv, &req, &resp);
    it_resp_free(&resp);
    return status;
}

static void it_describe_exit(const char *what, int status)
{
    if (WIFEXITED(status))
        fprintf(stderr, "harness: %s exited with status %d\n", what,
                WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        fprintf(stderr, "harness: %s killed by signal %d\n", what,
                WTERMSIG(status));
}

/* SIGKILL and reap the child; returns -1 for the caller's failure path. */
static int it_server_kill(struct it_server *srv)
{
    kill(srv->pid, SIGKILL);
    waitpid(srv->pid, NULL, 0);
    srv->pid = 0;
    return -1;
}

int it_server_start(struct it_server *srv, const char *tag,
                    const char *const *overrides)
{
    return it_server_start_port(srv, 0, tag, overrides);
}

/* it_server_start_port(), and with hostname (not NULL) in namespaces of
 * its own (it_server_start_ns()). */
static int it_server_launch(struct it_server *srv, uint16_t port,
                            const char *tag, const char *const *overrides,
                            const char *hostname)
{
    char port_arg[16];
    char *argv[4];
    char **env;
    int64_t deadline;
    int status;

    it_init();
    memset(srv, 0, sizeof(*srv));
    srv->port = port ? port : it_free_port();
    if (srv->port == 0) {
        fprintf(stderr, "harness: no free port\n");
        return -1;
    }
    if (snprintf(srv->log_path, sizeof(srv->log_path), "%s/%s-%u.log",
                 it_log_dir(), tag,
                 (unsigned)srv->port) >= (int)sizeof(srv->log_path)) {
        fprintf(stderr, "harness: log path too long\n");
        return -1;
    }
    unlink(srv->log_path);
    snprintf(port_arg, sizeof(port_arg), "%u", (unsigned)srv->port);
    argv[0] = (char *)it_bin();
    argv[1] = (char *)"--port";
    argv[2] = port_arg;
    argv[3] = NULL;
    if (access(argv[0], X_OK) != 0) {
        fprintf(stderr, "harness: %s is not executable: %s\n", argv[0],
                strerror(errno));
        return -1;
    }
    env = it_env_build(overrides);
    srv->pid = hostname ? it_spawn_ns(argv, env, srv->log_path, hostname)
                        : it_spawn(argv, env, srv->log_path);
    it_env_free(env);
    if (srv->pid < 0) {
        srv->pid = 0;
        return -1;
    }

    deadline = util_mono_ms() + IT_START_TIMEOUT_MS;
    for (;;) {
        if (waitpid(srv->pid, &status, WNOHANG) == srv->pid) {
            srv->pid = 0;
            it_describe_exit("seckilld", status);
            fprintf(stderr, "harness: seckilld died on start; log: %s\n",
                    srv->log_path);
            return -1;
        }
        if (it_healthz(srv) == 200)
            return 0;
        if (util_mono_ms() >= deadline)
            break;
        usleep(50 * 1000);
    }
    fprintf(stderr,
            "harness: seckilld on port %u did not answer GET /healthz 200 "
            "within %d ms; log: %s\n",
            (unsigned)srv->port, IT_START_TIMEOUT_MS, srv->log_path);
    return it_server_kill(srv);
}

int it_server_start_port(struct it_server *srv, uint16_t port, const char *tag,
                         const char *const *overrides)
{
    return it_server_launch(srv, port, tag, overrides, NULL);
}

int it_server_start_ns(struct it_server *srv, const char *tag,
                       const char *const *overrides, const char *hostname)
{
    return it_server_launch(srv, 0, tag, overrides, hostname);
}

int it_server_start_port_ns(struct it_server *srv, uint16_t port,
                            const char *tag, const char *const *overrides,
                            const char *hostname)
{
    return it_server_launch(srv, port, tag, overrides, hostname);
}

bool it_server_alive(struct it_server *srv)
{
    int status;

    if (srv->pid <= 0)
        return false;
    if (waitpid(srv->pid, &status, WNOHANG) == srv->pid) {
        it_describe_exit("seckilld", status);
        fprintf(stderr, "harness: log: %s\n", srv->log_path);
        srv->pid = 0;
        return false;
    }
    return true;
}

int it_server_stop(struct it_server *srv)
{
    int status = 0;

    if (srv->pid <= 0)
        return 0;
    if (kill(srv->pid, SIGTERM) != 0) {
        fprintf(stderr, "harness: kill(%d): %s\n", (int)srv->pid,
                strerror(errno));
        srv->pid = 0;
        return -1;
    }
    if (it_wait_exit(srv->pid, IT_STOP_TIMEOUT_MS, &status) != 0) {
        fprintf(stderr,
                "harness: seckilld (pid %d) still running %d ms after "
                "SIGTERM; killed; log: %s\n",
                (int)srv->pid, IT_STOP_TIMEOUT_MS, srv->log_path);
        return it_server_kill(srv);
    }
    srv->pid = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    it_describe_exit("seckilld after SIGTERM", status);
    fprintf(stderr, "harness: log: %s\n", srv->log_path);
    return -1;
}

static bool it_teardown_failed;

int it_group_teardown(struct it_server *srvs, size_t n)
{
    int rc = 0;
    size_t i;

    for (i = 0; i < n; i++)
        if (it_server_stop(&srvs[i]) != 0)
            rc = -1;
    it_sql_close();
    if (rc != 0)
        it_teardown_failed = true;
    return rc;
}

int it_exit_status(int failed)
{
    return failed ? failed : it_teardown_failed;
}

/* ---- HTTP ---- */

static size_t it_on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct it_resp *resp = arg;
    size_t n = size * nmemb;

    resp->body = xrealloc(resp->body, resp->len + n + 1);
    memcpy(resp->body + resp->len, data, n);
    resp->len += n;
    resp->body[resp->len] = '\0';
    return n;
}

/* Copy the value of a "Name: value\r\n" line into dst if name matches. */
static void it_take_header(const char *line, size_t len, const char *name,
                           char *dst, size_t dst_size)
{
    size_t nlen = strlen(name);
    size_t vlen;

    if (len <= nlen || line[nlen] != ':' || strncasecmp(line, name, nlen))
        return;
    line += nlen + 1;
    len -= nlen + 1;
    while (len && (*line == ' ' || *line == '\t')) {
        line++;
        len--;
    }
    while (len && (line[len - 1] == '\r' || line[len - 1] == '\n' ||
                   line[len - 1] == ' '))
        len--;
    vlen = len < dst_size - 1 ? len : dst_size - 1;
    memcpy(dst, line, vlen);
    dst[vlen] = '\0';
}

static size_t it_on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    struct it_resp *resp = arg;
    size_t n = size * nmemb;

    /* A new status line (after a 100 Continue) starts a new header set. */
    if (n >= 5 && strncmp(data, "HTTP/", 5) == 0) {
        resp->allow[0] = resp->retry_after[0] = resp->content_type[0] = '\0';
        resp->headers_len = 0;
        return n;
    }
    resp->headers = xrealloc(resp->headers, resp->headers_len + n + 1);
    memcpy(resp->headers + resp->headers_len, data, n);
    resp->headers_len += n;
    resp->headers[resp->headers_len] = '\0';
    it_take_header(data, n, "Allow", resp->allow, sizeof(resp->allow));
    it_take_header(data, n, "Retry-After", resp->retry_after,
                   sizeof(resp->retry_after));
    it_take_header(data, n, "Content-Type", resp->content_type,
                   sizeof(resp->content_type));
    return n;
}

CURL *it_http_prepare(const struct it_server *srv, const struct it_req *req,
                      struct it_resp *resp)
{
    char url[1024];
    char *auth = NULL;
    CURL *h;

    it_init();
    memset(resp, 0, sizeof(*resp));
    h = curl_easy_init();
    if (!h)
        abort();
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", (unsigned)srv->port,
             req->path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT,
                     req->timeout_s > 0 ? req->timeout_s : IT_HTTP_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT,
                     req->timeout_s > 0 ? req->timeout_s : IT_HTTP_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, it_on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, it_on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, resp);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, resp->errbuf_);
    curl_easy_setopt(h, CURLOPT_PRIVATE, resp);

    /* Send bodies at once, never wait for a 100 Continue. */
    resp->hdrs_ = curl_slist_append(resp->hdrs_, "Expect:");
    if (req->authorization) {
        auth = xasprintf("Authorization: %s", req->authorization);
        resp->hdrs_ = curl_slist_append(resp->hdrs_, auth);
    } else if (req->token) {
        auth = xasprintf("Authorization: Bearer %s", req->token);
        resp->hdrs_ = curl_slist_append(resp->hdrs_, auth);
    }
    free(auth);
    for (size_t i = 0; req->headers && req->headers[i]; i++)
        resp->hdrs_ = curl_slist_append(resp->hdrs_, req->headers[i]);
    if (req->header)
        resp->hdrs_ = curl_slist_append(resp->hdrs_, req->header);

    if (strcmp(req->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (req->body) {
        size_t len = req->body_len ? req->body_len : strlen(req->body);

        resp->hdrs_ =
            curl_slist_append(resp->hdrs_, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, req->body);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
    } else if (strcmp(req->method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
        curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, "");
    } else if (strcmp(req->method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, resp->hdrs_);
    return h;
}

void it_http_complete(CURL *h, CURLcode rc, struct it_resp *resp)
{
    double total = 0;

    resp->curl_rc = rc;
    resp->status = 0;
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
    else
        snprintf(resp->curl_error, sizeof(resp->curl_error), "%s",
                 resp->errbuf_[0] ? resp->errbuf_ : curl_easy_strerror(rc));
    curl_easy_getinfo(h, CURLINFO_TOTAL_TIME, &total);
    resp->elapsed_ms = total * 1000;
    curl_easy_cleanup(h);
    curl_slist_free_all(resp->hdrs_);
    resp->hdrs_ = NULL;
    if (!resp->body)
        resp->body = xstrdup("");
    if (resp->len)
        resp->json = json_loadb(resp->body, resp->len, 0, NULL);
}

long it_http_do(const struct it_server *srv, const struct it_req *req,
                struct it_resp *resp)
{
    CURL *h = it_http_prepare(srv, req, resp);

    it_http_complete(h, curl_easy_perform(h), resp);
    return resp->status;
}

long it_http(const struct it_server *srv, const char *method, const char *path,
             const char *body, const char *token, struct it_resp *resp)
{
    struct it_req req = {
        .method = method, .path = path, .body = body, .token = token};

    return it_http_do(srv, &req, resp);
}

size_t it_resp_header(const struct it_resp *resp, const char *name, char *buf,
                      size_t cap)
{
    const char *line = resp->headers;
    size_t count = 0;

    buf[0] = '\0';
    while (line && *line) {
        size_t len = strcspn(line, "\n");
        char value[1024];

        value[0] = '\0';
        it_take_header(line, len, name, value, sizeof(value));
        if (value[0] || (len > strlen(name) && line[strlen(name)] == ':' &&
                         strncasecmp(line, name, strlen(name)) == 0)) {
            if (count++ == 0)
                snprintf(buf, cap, "%s", value);
        }
        line += len + (line[len] == '\n');
    }
    return count;
}

void it_resp_free(struct it_resp *resp)
{
    free(resp->headers);
    free(resp->body);
    json_decref(resp->json);
    curl_slist_free_all(resp->hdrs_);
    memset(resp, 0, sizeof(*resp));
}

static void it_dump(const struct it_resp *resp)
{
    if (resp->curl_rc != CURLE_OK)
        print_error("transport failure: %s (%s)\n",
                    curl_easy_strerror(resp->curl_rc), resp->errbuf_);
    else
        print_error("got HTTP %ld, Content-Type \"%s\", body: %.2000s\n",
                    resp->status, resp->content_type,
                    resp->body ? resp->body : "");
}

void it_assert_status_at(const struct it_resp *resp, long status,
                         const char *file, int line)
{
    if (resp->curl_rc != CURLE_OK || resp->status != status) {
        print_error("expected HTTP %ld\n", status);
        it_dump(resp);
        _fail(file, line);
    }
}

void it_assert_json_type_at(const struct it_resp *resp, const char *file,
                            int line)
{
    size_t n = strlen("application/json");

    if (strncasecmp(resp->content_type, "application/json", n) != 0 ||
        (resp->content_type[n] != '\0' && resp->content_type[n] != ';' &&
         resp->content_type[n] != ' ')) {
        print_error("expected Content-Type application/json\n");
        it_dump(resp);
        _fail(file, line);
    }
}

void it_assert_error_at(const struct it_resp *resp, long status,
                        const char *code, const char *file, int line)
{
    const json_t *err, *msg;
    const char *got;

    it_assert_status_at(resp, status, file, line);
    it_assert_json_type_at(resp, file, line);
    err = resp->json ? json_object_get(resp->json, "error") : NULL;
    /* The envelope: code and message, and optionally an object of
     * details (the checks of /readyz). Nothing else. */
    if (!json_is_object(resp->json) || json_object_size(resp->json) != 1 ||
        !json_is_object(err) ||
        json_object_size(err) !=
            2u + (json_object_get(err, "details") != NULL) ||
        (json_object_get(err, "details") &&
         !json_is_object(json_object_get(err, "details")))) {
        print_error("expected {\"error\":{\"code\",\"message\"[,"
                    "\"details\":{}]}}\n");
        it_dump(resp);
        _fail(file, line);
    }
    got = it_json_str(err, "code");
    msg = json_object_get(err, "message");
    if (!got || strcmp(got, code) != 0 || !json_is_string(msg) ||
        json_string_length(msg) == 0) {
        print_error("expected error code %s with a message\n", code);
        it_dump(resp);
        _fail(file, line);
    }
}

const char *it_json_str(const json_t *obj, const char *key)
{
    const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;

    return json_is_string(v) ? json_string_value(v) : NULL;
}

bool it_is_digits(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

int64_t it_json_id_at(const json_t *obj, const char *key, const char *file,
                      int line)
{
    const char *s = it_json_str(obj, key);
    int64_t id = 0;

    if (!it_is_digits(s) || util_parse_id(s, strlen(s), &id) != 0) {
        char *dump = obj ? json_dumps(obj, JSON_COMPACT) : NULL;

        print_error("expected \"%s\" to be an id string in %s\n", key,
                    dump ? dump : "(null)");
        free(dump);
        _fail(file, line);
    }
    return id;
}

bool it_header_lists(const char *value, const char *token)
{
    size_t tlen = strlen(token);

    while (*value) {
        size_t len;

        while (*value == ' ' || *value == ',')
            value++;
        len = strcspn(value, ",");
        while (len && value[len - 1] == ' ')
            len--;
        if (len == tlen && strncmp(value, token, tlen) == 0)
            return true;
        value += strcspn(value, ",");
    }
    return false;
}

/* ---- tokens ---- */

const unsigned char *it_secret(void)
{
    static unsigned char key[TOKEN_KEY_LEN];
    static bool have;
    const char *hex = getenv("SECKILL_SECRET");

    if (have)
        return key;
    if (!hex || util_hex_decode(hex, key, sizeof(key)) != 0) {
        print_error("SECKILL_SECRET must be %d hex digits "
                    "(source .run/env.test)\n",
                    2 * TOKEN_KEY_LEN);
        fail();
    }
    have = true;
    return key;
}

void it_token(int64_t user_id, enum token_role role, int64_t ttl_s,
              char out[TOKEN_STR_LEN])
{
    struct token_claims c = {
        .user_id = user_id,
        .role = role,
        .expires = util_now_ms() / 1000 + ttl_s,
    };

    assert_int_equal(0, token_sign(it_secret(), &c, out));
}

/* ---- the backends ---- */

const struct store_config *it_store_config(void)
{
    /* Parsed once; the strings stay owned by cfg for the whole run. */
    static struct config cfg;
    static struct store_config sc;
    static bool have;
    const char *mysql = getenv("SECKILL_MYSQL_URL");
    const char *redis = getenv("SECKILL_REDIS_URL");
    char err[256] = "";

    if (have)
        return &sc;
    if (!mysql || !redis) {
        print_error("SECKILL_MYSQL_URL and SECKILL_REDIS_URL must be set "
                    "(source .run/env.test)\n");
        fail();
    }
    if (config_mysql_url(&cfg, mysql, &sc, err, sizeof(err)) != 0 ||
        config_redis_url(&cfg, redis, &sc, err, sizeof(err)) != 0) {
        config_free(&cfg);
        print_error("%s (source .run/env.test)\n", err);
        fail();
    }
    sc.connect_timeout_ms = 5000;
    sc.io_timeout_ms = 30000;
    have = true;
    return &sc;
}

/* ---- MySQL ---- */

char *it_mysql_url_with_port(const char *url, uint16_t port)
{
    const char *p, *slash, *at, *userinfo_end;

    if (strncmp(url, "mysql://", 8) != 0)
        return NULL;
    p = url + 8;
    slash = p + strcspn(p, "/?#");
    userinfo_end = p;
    for (at = p; at < slash; at++)
        if (*at == '@')
            userinfo_end = at + 1;
    return xasprintf("mysql://%.*s127.0.0.1:%u%s", (int)(userinfo_end - p), p,
                     (unsigned)port, slash);
}

static MYSQL *it_db;

static MYSQL *it_sql_conn(void)
{
    const struct store_config *sc;

    if (it_db)
        return it_db;
    sc = it_store_config();
    it_db = mysql_init(NULL);
    if (!it_db)
        abort();
    if (!mysql_real_connect(it_db, sc->mysql_host, sc->mysql_user,
                            sc->mysql_pass, sc->mysql_db, sc->mysql_port, NULL,
                            0)) {
        print_error("mysql connect %s:%u: %s\n", sc->mysql_host, sc->mysql_port,
                    mysql_error(it_db));
        mysql_close(it_db);
        it_db = NULL;
        fail();
    }
    return it_db;
}

void it_sql_close(void)
{
    mysql_close(it_db);
    it_db = NULL;
}

/* The helper's connection was killed or timed out. */
static bool it_sql_lost(MYSQL *db)
{
    unsigned e = mysql_errno(db);

    return e == 2006 || e == 2013; /* CR_SERVER_GONE_ERROR, CR_SERVER_LOST */
}

/*
 * Send sql on the helper connection, reconnecting once if the connection
 * was lost (a test may KILL it). Returns mysql_query()'s result; *dbp is
 * the connection used.
 */
static int it_sql_query(const char *sql, MYSQL **dbp)
{
    MYSQL *db = it_sql_conn();
    int rc = mysql_query(db, sql);

    if (rc != 0 && it_sql_lost(db)) {
        it_sql_close();
        db = it_sql_conn();
        rc = mysql_query(db, sql);
    }
    *dbp = db;
    return rc;
}

/* Run sql; asserts it ran; returns its result set (NULL if none). */
static MYSQL_RES *it_sql_run(const char *sql, bool want_rows)
{
    MYSQL *db;
    MYSQL_RES *res;

    if (it_sql_query(sql, &db) != 0) {
        print_error("mysql: %s: %s\n", sql, mysql_error(db));
        fail();
    }
    res = mysql_store_result(db);
    if (want_rows && !res) {
        print_error("mysql: %s: no result set\n", sql);
        fail();
    }
    return res;
}

static int64_t it_sql_cell(MYSQL_ROW row)
{
    if (!row[0])
        return -1;
    return strtoll(row[0], NULL, 10);
}

/* The SQL text of a printf-style query; free(3) it. */
static char *sql_format(const char *fmt, va_list ap)
{
    char *sql;

    if (vasprintf(&sql, fmt, ap) < 0)
        abort();
    return sql;
}

int64_t it_sql_scalar(const char *fmt, ...)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    int64_t v;
    va_list ap;
    char *sql;

    va_start(ap, fmt);
    sql = sql_format(fmt, ap);
    va_end(ap);
    res = it_sql_run(sql, true);
    row = mysql_fetch_row(res);
    if (!row) {
        print_error("mysql: %s: no row\n", sql);
        mysql_free_result(res);
        free(sql);
        fail();
    }
    v = it_sql_cell(row);
    mysql_free_result(res);
    free(sql);
    return v;
}

size_t it_sql_column(int64_t *out, size_t max, const char *fmt, ...)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    size_t n = 0;
    va_list ap;
    char *sql;

    va_start(ap, fmt);
    sql = sql_format(fmt, ap);
    va_end(ap);
    res = it_sql_run(sql, true);
    while ((row = mysql_fetch_row(res))) {
        if (n < max)
            out[n] = it_sql_cell(row);
        n++;
    }
    mysql_free_result(res);
    free(sql);
    return n;
}

unsigned it_sql_exec(const char *fmt, ...)
{
    MYSQL *db;
    MYSQL_RES *res;
    unsigned err = 0;
    va_list ap;
    char *sql;

    va_start(ap, fmt);
    sql = sql_format(fmt, ap);
    va_end(ap);
    if (it_sql_query(sql, &db) != 0) {
        err = mysql_errno(db);
    } else {
        res = mysql_store_result(db);
        mysql_free_result(res);
    }
    free(sql);
    return err;
}

int64_t it_sql_order_count(int64_t voucher_id)
{
    return it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                         "WHERE voucher_id = %lld",
                         (long long)voucher_id);
}

int64_t it_sql_stock(int64_t voucher_id)
{
    return it_sql_scalar("SELECT stock FROM seckill_vouchers "
                         "WHERE voucher_id = %lld",
                         (long long)voucher_id);
}

/* ---- Redis ---- */

/* Check the reply r to what on rc and free it; false after saying why. */
static bool it_redis_reply_ok(redisContext *rc, const char *what, redisReply *r)
{
    bool ok = r && r->type != REDIS_REPLY_ERROR;

    if (!ok)
        fprintf(stderr, "harness: redis %s: %s\n", what,
                r ? r->str : (rc->err ? rc->errstr : "no reply"));
    freeReplyObject(r);
    return ok;
}

static struct timeval it_timeval(unsigned ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = ms % 1000 * 1000};

    return tv;
}

redisContext *it_redis_open(const struct store_config *sc)
{
    redisContext *rc;
    redisReply *r;

    rc = redisConnectWithTimeout(sc->redis_host, (int)sc->redis_port,
                                 it_timeval(sc->connect_timeout_ms));
    if (!rc || rc->err) {
        fprintf(stderr, "harness: redis connect %s:%u: %s\n", sc->redis_host,
                sc->redis_port, rc ? rc->errstr : "out of memory");
        goto free_out;
    }
    /* A broken server must fail the test, not hang it. */
    if (redisSetTimeout(rc, it_timeval(sc->io_timeout_ms)) != REDIS_OK)
        goto free_out;
    if (sc->redis_pass) {
        r = sc->redis_user
                ? redisCommand(rc, "AUTH %s %s", sc->redis_user, sc->redis_pass)
                : redisCommand(rc, "AUTH %s", sc->redis_pass);
        if (!it_redis_reply_ok(rc, "AUTH", r))
            goto free_out;
    }
    r = redisCommand(rc, "SELECT %u", sc->redis_db);
    if (!it_redis_reply_ok(rc, "SELECT", r))
        goto free_out;
    return rc;

free_out:
    redisFree(rc);
    return NULL;
}

redisContext *it_redis_connect(void)
{
    redisContext *rc = it_redis_open(it_store_config());

    if (!rc) {
        print_error("cannot use SECKILL_REDIS_URL (see above)\n");
        fail();
    }
    return rc;
}

/* ---- the API ---- */

char *it_time(int64_t offset_s, char *buf)
{
    return util_time_format(util_now_ms() / 1000 + offset_s, buf);
}

int64_t it_unique(void)
{
    static int64_t last;
    int64_t v = util_now_ms();

    if (v <= last)
        v = last + 1;
    last = v;
    return v;
}

int64_t it_voucher_create(const struct it_server *srv, const char *body)
{
    char admin[TOKEN_STR_LEN];
    struct it_resp resp;
    int64_t id;

    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin);
    it_http(srv, "POST", "/api/vouchers", body, admin, &resp);
    if (resp.status != 201)
        print_error("POST /api/vouchers %s\n", body);
    it_assert_status(&resp, 201);
    it_assert_json_type(&resp);
    id = it_json_id(resp.json, "id");
    it_resp_free(&resp);
    return id;
}

int64_t it_seckill_create(const struct it_server *srv, int64_t shop_id,
                          int64_t stock, int64_t begin_off_s, int64_t end_off_s)
{
    char begin[UTIL_TIME_LEN], end[UTIL_TIME_LEN];
    char *body;
    int64_t id;

    body = xasprintf("{\"shopId\":%lld,\"title\":\"it seckill\","
                     "\"subTitle\":\"sub\",\"rules\":\"one per user\","
                     "\"payValue\":4750,\"actualValue\":5000,"
                     "\"type\":\"seckill\",\"stock\":%lld,"
                     "\"beginTime\":\"%s\",\"endTime\":\"%s\"}",
                     (long long)shop_id, (long long)stock,
                     it_time(begin_off_s, begin),
                     it_time(end_off_s > 0 ? end_off_s : 3600, end));
    id = it_voucher_create(srv, body);
    free(body);
    if (end_off_s <= 0) {
        char admin[TOKEN_STR_LEN], path[96];
        struct it_resp resp;

        it_token(1, TOKEN_ROLE_ADMIN, 3600, admin);
        snprintf(path, sizeof(path), "/api/vouchers/%lld/stop", (long long)id);
        it_http(srv, "POST", path, NULL, admin, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
    }
    return id;
}

long it_purchase(const struct it_server *srv, int64_t voucher_id,
                 int64_t user_id, struct it_resp *resp)
{
    char tok[TOKEN_STR_LEN];
    char path[96];

    it_token(user_id, TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
             (long long)voucher_id);
    return it_http(srv, "POST", path, NULL, tok, resp);
}

int64_t it_buy(const struct it_server *srv, int64_t voucher_id, int64_t user_id)
{
    struct it_resp resp;
    int64_t id;

    it_purchase(srv, voucher_id, user_id, &resp);
    it_assert_status(&resp, 201);
    id = it_json_id(resp.json, "orderId");
    it_resp_free(&resp);
    return id;
}

/* ---- faults ---- */

int it_log_voucher_count(const char *path, const char *msg, int64_t voucher_id)
{
    char line[4096], needle[40];
    FILE *f = fopen(path, "r");
    int n = 0;

    if (!f)
        return 0;
    snprintf(needle, sizeof(needle), "voucher=%lld", (long long)voucher_id);
    while (fgets(line, sizeof(line), f)) {
        const char *at = strstr(line, needle);

        if (strstr(line, msg) && at &&
            (at[strlen(needle)] < '0' || at[strlen(needle)] > '9'))
            n++;
    }
    fclose(f);
    return n;
}

char *it_file_read(const char *path)
{
    FILE *f = fopen(path, "r");
    char *s;
    long n;

    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    s = xcalloc(1, (size_t)(n > 0 ? n : 0) + 1);
    if (n > 0 && fread(s, 1, (size_t)n, f) != (size_t)n)
        s[0] = '\0';
    fclose(f);
    return s;
}

pid_t it_pidfile_read(const char *path)
{
    char buf[32] = "";
    long pid;
    FILE *f = fopen(path, "r");

    if (!f)
        return -1;
    if (!fgets(buf, sizeof(buf), f))
        buf[0] = '\0';
    fclose(f);
    pid = strtol(buf, NULL, 10);
    return pid > 0 && pid <= INT_MAX ? (pid_t)pid : -1;
}

int it_blackhole_listen(uint16_t *port)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd, err;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        goto close_fail;
    *port = ntohs(sa.sin_port);
    return fd;

close_fail:
    err = errno;
    close(fd);
    errno = err;
fail:
    fprintf(stderr, "harness: blackhole listener: %s\n", strerror(errno));
    return -1;
}

size_t it_sql_kill_sessions_of(pid_t pid, uint16_t port)
{
    uint16_t ports[64];
    size_t n, i, killed = 0;
    int64_t self, id;

    self = it_sql_scalar("SELECT CONNECTION_ID()");
    n = it_proc_tcp_ports(pid, port, ports, 64);
    if (n > 64)
        n = 64;
    for (i = 0; i < n; i++) {
        id = it_sql_scalar("SELECT COALESCE(MAX(ID), -1) FROM "
                           "information_schema.PROCESSLIST WHERE HOST = "
                           "'127.0.0.1:%u'",
                           (unsigned)ports[i]);
        if (id <= 0 || id == self)
            continue;
        /* Not counted if it ended meanwhile (1094, unknown thread). */
        if (it_sql_exec("KILL CONNECTION %lld", (long long)id) == 0)
            killed++;
    }
    return killed;
}

void it_http_run_all(struct it_req *reqs, const struct it_server **to,
                     struct it_resp *resps, size_t n)
{
    CURLM *multi = curl_multi_init();
    CURLMsg *msg;
    int running = 0, left;
    size_t i, done = 0;

    assert_non_null(multi);
    for (i = 0; i < n; i++) {
        CURL *h = it_http_prepare(to[i], &reqs[i], &resps[i]);

        assert_int_equal(CURLM_OK, curl_multi_add_handle(multi, h));
    }
    do {
        assert_int_equal(CURLM_OK, curl_multi_perform(multi, &running));
        while ((msg = curl_multi_info_read(multi, &left))) {
            struct it_resp *resp = NULL;
            CURL *h = msg->easy_handle;
            CURLcode rc = msg->data.result;

            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(h, CURLINFO_PRIVATE, &resp);
            curl_multi_remove_handle(multi, h);
            it_http_complete(h, rc, resp);
            done++;
        }
        if (running)
            assert_int_equal(CURLM_OK,
                             curl_multi_poll(multi, NULL, 0, 1000, NULL));
    } while (running);
    assert_int_equal(n, done);
    curl_multi_cleanup(multi);
    it_http_report(reqs, to, resps, n);
}

void it_http_report(const struct it_req *reqs, const struct it_server **to,
                    const struct it_resp *resps, size_t n)
{
    size_t failed = 0, slowest = 0;

    for (size_t i = 0; i < n; i++) {
        if (resps[i].elapsed_ms > resps[slowest].elapsed_ms)
            slowest = i;
        if (resps[i].curl_rc == CURLE_OK)
            continue;
        if (failed++ < 20)
            print_error("request %zu of %zu, %s %s to port %u: no answer "
                        "after %.0f ms: %s\n",
                        i, n, reqs[i].method, reqs[i].path,
                        (unsigned)to[i]->port, resps[i].elapsed_ms,
                        resps[i].curl_error);
    }
    if (failed && n)
        print_error("%zu of %zu requests got no answer; the slowest took "
                    "%.0f ms (request %zu, status %ld)\n",
                    failed, n, resps[slowest].elapsed_ms, slowest,
                    resps[slowest].status);
}

/* ---- the TCP proxy ---- */

static const char *proxy_bin(void)
{
    static char buf[IT_PATH_MAX];
    const char *env = getenv("SECKILL_TCPPROXY");
    const char *bin = it_bin(), *slash = strrchr(bin, '/');

    if (env && *env)
        return env;
    snprintf(buf, sizeof(buf), "%.*s/tools/tcpproxy",
             slash ? (int)(slash - bin) : 1, slash ? bin : ".");
    return buf;
}

int it_proxy_start(struct it_proxy *p, const char *tag, uint16_t target)
{
    char listen[16], ctl[16], to[32];

    memset(p, 0, sizeof(*p));
    p->port = it_free_port();
    p->ctl = it_free_port();
    snprintf(listen, sizeof(listen), "%u", (unsigned)p->port);
    snprintf(ctl, sizeof(ctl), "%u", (unsigned)p->ctl);
    snprintf(to, sizeof(to), "127.0.0.1:%u", (unsigned)target);
    if (snprintf(p->log, sizeof(p->log), "%s/proxy-%s-%u.log", it_log_dir(),
                 tag, (unsigned)p->port) >= (int)sizeof(p->log)) {
        fprintf(stderr, "harness: log path too long\n");
        return -1;
    }
    unlink(p->log);
    char *argv[] = {(char *)proxy_bin(), "--listen", listen, "--target", to,
                    "--control",         ctl,        NULL};
    p->pid = it_spawn(argv, NULL, p->log);
    if (p->pid < 0 || it_wait_tcp(p->ctl, 5000) != 0 ||
        it_wait_tcp(p->port, 5000) != 0) {
        fprintf(stderr, "harness: tcpproxy did not start; log %s\n", p->log);
        return -1;
    }
    return 0;
}

int it_proxy_ask(const struct it_proxy *p, const char *cmd, char *reply,
                 size_t cap)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(p->ctl),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char line[160];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    size_t have = 0;
    int rc = -1;

    reply[0] = '\0';
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        goto out;
    snprintf(line, sizeof(line), "%s\n", cmd);
    if (write(fd, line, strlen(line)) != (ssize_t)strlen(line))
        goto out;
    while (have < cap - 1 && !strchr(reply, '\n')) {
        ssize_t n = read(fd, reply + have, cap - 1 - have);

        if (n <= 0)
            break;
        have += (size_t)n;
        reply[have] = '\0';
    }
    rc = strncmp(reply, "ok", 2) == 0 ? 0 : -1;
    if (rc)
        fprintf(stderr, "harness: proxy %s: %s\n", cmd, reply);
out:
    close(fd);
    return rc;
}

int it_proxy_ctl(const struct it_proxy *p, const char *cmd)
{
    char reply[160];

    return it_proxy_ask(p, cmd, reply, sizeof(reply));
}

void it_proxy_stop(struct it_proxy *p)
{
    int status;

    if (p->pid <= 0)
        return;
    kill(p->pid, SIGKILL);
    it_wait_exit(p->pid, 5000, &status);
    p->pid = 0;
}

/* ---- private servers ---- */

const char *it_which(const char *prog)
{
    static char buf[IT_PATH_MAX];
    const char *p = getenv("PATH");

    if (!p)
        p = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    while (*p) {
        size_t len = strcspn(p, ":");

        snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, p, prog);
        if (len && access(buf, X_OK) == 0)
            return buf;
        p += len;
        if (*p == ':')
            p++;
    }
    /* Debian keeps mariadbd in /usr/sbin, which a user's PATH may lack. */
    snprintf(buf, sizeof(buf), "/usr/sbin/%s", prog);
    return access(buf, X_OK) == 0 ? buf : NULL;
}

/* Wait until redis-server pid answers PING on port (AUTH pass first). */
static pid_t redis_await(pid_t pid, uint16_t port, const char *pass,
                         const char *log_path);

pid_t it_redis_start(uint16_t port, const char *log_path, const char *pass)
{
    return it_redis_start_with(port, log_path, pass, NULL);
}

pid_t it_redis_start_with(uint16_t port, const char *log_path, const char *pass,
                          const char *const *extra)
{
    return it_redis_start_env(port, log_path, pass, extra, NULL);
}

pid_t it_redis_start_env(uint16_t port, const char *log_path, const char *pass,
                         const char *const *extra, const char *const *overrides)
{
    const char *bin = it_which("redis-server");
    char port_arg[16];
    char *argv[48], **env;
    int n = 0;
    pid_t pid;

    if (!bin) {
        fprintf(stderr, "harness: redis-server not found in PATH\n");
        return -1;
    }
    snprintf(port_arg, sizeof(port_arg), "%u", (unsigned)port);
    /* A data file of its own, removed first: without --dir a Redis loads
     * whatever dump.rdb lies in the current folder (the checkout's, left
     * there by another Redis), and starts with someone else's keys. A
     * caller that names its own --dir keeps it (a second, relative --dir
     * would be read from inside the first). */
    bool own_dir = true;
    char rdb[32], path[IT_PATH_MAX + 32];

    for (int i = 0; extra && extra[i]; i++)
        own_dir &= strcmp(extra[i], "--dir") != 0;
    snprintf(rdb, sizeof(rdb), "it-redis-%u.rdb", (unsigned)port);
    snprintf(path, sizeof(path), "%s/%s", it_log_dir(), rdb);
    if (own_dir)
        unlink(path);
    const char *const base[] = {
        bin,         "--port",       port_arg, "--bind",
        "127.0.0.1", "--save",       "",       "--appendonly",
        "no",        "--daemonize",  "no",     "--enable-debug-command",
        "local",     "--dbfilename", rdb,      NULL};
    for (int i = 0; base[i]; i++)
        argv[n++] = (char *)base[i];
    if (own_dir) {
        argv[n++] = "--dir";
        argv[n++] = (char *)it_log_dir();
    }
    if (pass) {
        argv[n++] = "--requirepass";
        argv[n++] = (char *)pass;
    }
    for (int i = 0; extra && extra[i] && n < 46; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    env = overrides ? it_env_build(overrides) : NULL;
    pid = it_spawn(argv, env, log_path);
    if (env)
        it_env_free(env);
    if (pid < 0)
        return -1;
    return redis_await(pid, port, pass, log_path);
}

pid_t it_sentinel_start(uint16_t port, const char *name, uint16_t master_port,
                        unsigned down_ms, const char *log_path)
{
    const char *bin = it_which("redis-server");
    char conf[IT_PATH_MAX + 16];
    FILE *f;
    pid_t pid;

    if (!bin) {
        fprintf(stderr, "harness: redis-server not found in PATH\n");
        return -1;
    }
    snprintf(conf, sizeof(conf), "%s.conf", log_path);
    f = fopen(conf, "w");
    if (!f) {
        fprintf(stderr, "harness: cannot write %s: %s\n", conf,
                strerror(errno));
        return -1;
    }
    fprintf(f,
            "port %u\nbind 127.0.0.1\ndaemonize no\n"
            "sentinel monitor %s 127.0.0.1 %u 2\n"
            "sentinel down-after-milliseconds %s %u\n"
            "sentinel failover-timeout %s 10000\n"
            "sentinel parallel-syncs %s 1\n",
            (unsigned)port, name, (unsigned)master_port, name, down_ms, name,
            name);
    fclose(f);
    char *argv[] = {(char *)bin, conf, "--sentinel", NULL};
    pid = it_spawn(argv, NULL, log_path);
    if (pid < 0)
        return -1;
    return redis_await(pid, port, NULL, log_path);
}

static pid_t redis_await(pid_t pid, uint16_t port, const char *pass,
                         const char *log_path)
{
    for (int i = 0; i < 250; i++) {
        redisContext *rc = redisConnect("127.0.0.1", port);
        redisReply *r = NULL;

        if (rc && !rc->err) {
            if (pass)
                freeReplyObject(redisCommand(rc, "AUTH %s", pass));
            r = redisCommand(rc, "PING");
        }
        bool up = r && r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
        redisFree(rc);
        if (up)
            return pid;
        usleep(20 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fprintf(stderr, "harness: redis-server on port %u did not start; log: %s\n",
            (unsigned)port, log_path);
    return -1;
}

void it_lb_status(const struct it_server *stats, const char *backend, int n,
                  char *out, size_t cap, long *retries, long *redispatches)
{
    struct it_req req = {.method = "GET", .path = "/;csv", .timeout_s = 5};
    struct it_resp resp;
    char prefix[96];
    const char *line;

    out[0] = '\0';
    snprintf(prefix, sizeof(prefix), "%s,app%d,", backend, n);
    it_http_do(stats, &req, &resp);
    line = resp.body ? strstr(resp.body, prefix) : NULL;
    if (line) {
        /* Fields: ..., 16 wretr, 17 wredis, 18 status. */
        const char *f = line;
        for (int i = 1; i < 18 && f; i++) {
            if (i == 16 && retries)
                *retries = strtol(f, NULL, 10);
            if (i == 17 && redispatches)
                *redispatches = strtol(f, NULL, 10);
            f = strchr(f, ',');
            if (f)
                f++;
        }
        if (f) {
            size_t len = strcspn(f, ",\n");
            snprintf(out, cap, "%.*s", (int)len, f);
        }
    }
    it_resp_free(&resp);
}

/* IT_ONLY=<glob>: run only the tests whose names match (cmocka's
 * filter), for a quick loop on one test. */
__attribute__((constructor)) static void it_only(void)
{
    if (getenv("IT_ONLY"))
        cmocka_set_test_filter(getenv("IT_ONLY"));
}

char *it_forged_xff(const char *last)
{
    const size_t head = strlen("X-Forwarded-For: "), want = 2040;
    size_t cap = head + want + 64, len, tail = strlen(last);
    char *h = xmalloc(cap);

    /* The value: addresses, blanks up to want bytes, then last. */
    len = (size_t)snprintf(h, cap, "X-Forwarded-For: ");
    for (unsigned i = 0; len - head + 16 + tail < want; i++)
        len += (size_t)snprintf(h + len, cap - len, "10.%u.%u.%u, ",
                                (i / 65536) % 256, (i / 256) % 256, i % 256);
    while (len - head + tail < want)
        h[len++] = ' ';
    snprintf(h + len, cap - len, "%s", last);
    return h;
}

long long it_redis_int(long long def, const char *fmt, ...)
{
    redisContext *rc = it_redis_connect();
    redisReply *r;
    long long v;
    va_list ap;

    va_start(ap, fmt);
    r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : def;
    freeReplyObject(r);
    redisFree(rc);
    return v;
}
