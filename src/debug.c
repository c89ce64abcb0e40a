/*
 * debug.c: logging (level + subsystem, NCCL's model) and the per-thread last-error text.
 *
 * Configured once per process from CHORUS_DEBUG, CHORUS_DEBUG_SUBSYS and CHORUS_DEBUG_FILE. A line
 * is formatted into one buffer and written with one call, so lines of concurrent threads and
 * processes do not interleave.
 */
#define _GNU_SOURCE
#include "debug.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "params.h"

int debug_level = LOG_WARN;
unsigned debug_subsys = SUB_ALL;

static FILE *debug_file;
static char debug_host[64];
static pthread_once_t debug_once = PTHREAD_ONCE_INIT;
static chorusResult_t debug_init_result;
static char debug_init_error[256];
static __thread int debug_rank TLS_HOT = -1;
static __thread char last_error[1024];
static __thread int quiet_errors TLS_HOT;
__thread int debug_has_error TLS_HOT; /* last_error holds text */

int debug_set_quiet_errors(int quiet)
{
    int was = quiet_errors;
    quiet_errors = quiet;
    return was;
}

static const struct {
    const char *name;
    unsigned bit;
} subsys_names[] = {{"INIT", SUB_INIT},     {"COLL", SUB_COLL},   {"P2P", SUB_P2P},
                    {"SHM", SUB_SHM},       {"NET", SUB_NET},     {"BOOT", SUB_BOOT},
                    {"ENV", SUB_ENV},       {"ALLOC", SUB_ALLOC}, {"GRAPH", SUB_GRAPH},
                    {"TUNING", SUB_TUNING}, {"PROXY", SUB_PROXY}, {"ALL", SUB_ALL}};

static const char *subsys_name(unsigned bit)
{
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
        if (subsys_names[i].bit == bit)
            return subsys_names[i].name;
    return "ALL";
}

static int parse_subsys(const char *text, unsigned *mask_p)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", text);
    int exclude = buf[0] == '^';
    unsigned mask = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf + exclude, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        unsigned bit = 0;
        for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
            if (strcasecmp(tok, subsys_names[i].name) == 0)
                bit = subsys_names[i].bit;
        if (bit == 0)
            return -1;
        mask |= bit;
    }
    *mask_p = exclude ? (SUB_ALL & ~mask) : mask;
    return 0;
}

static void debug_init_once(void)
{
    gethostname(debug_host, sizeof(debug_host) - 1);
    char *dot = strchr(debug_host, '.');
    if (dot)
        *dot = '\0';
    debug_file = stderr;
    const char *level = params_raw("CHORUS_DEBUG");
    if (level != NULL && level[0] != '\0') {
        if (strcasecmp(level, "NONE") == 0)
            debug_level = LOG_NONE;
        else if (strcasecmp(level, "VERSION") == 0)
            debug_level = LOG_VERSION;
        else if (strcasecmp(level, "WARN") == 0)
            debug_level = LOG_WARN;
        else if (strcasecmp(level, "INFO") == 0)
            debug_level = LOG_INFO;
        else if (strcasecmp(level, "TRACE") == 0)
            debug_level = LOG_TRACE;
        else {
            snprintf(debug_init_error, sizeof(debug_init_error),
                     "environment variable CHORUS_DEBUG=\"%s\" is not one of NONE, VERSION, WARN, "
                     "INFO, TRACE",
                     level);
            debug_init_result = chorusInvalidArgument;
        }
    }
    const char *subsys = params_raw("CHORUS_DEBUG_SUBSYS");
    if (subsys != NULL && subsys[0] != '\0' && parse_subsys(subsys, &debug_subsys) != 0) {
        snprintf(debug_init_error, sizeof(debug_init_error),
                 "environment variable CHORUS_DEBUG_SUBSYS=\"%s\" is not a comma list of INIT, "
                 "COLL, P2P, SHM, NET, BOOT, ENV, ALLOC, GRAPH, TUNING, PROXY, ALL (optionally "
                 "starting with ^)",
                 subsys);
        debug_init_result = chorusInvalidArgument;
        debug_subsys = SUB_ALL;
    }
    const char *path = params_raw("CHORUS_DEBUG_FILE");
    if (path != NULL && path[0] != '\0') {
        /* Expand %h (host) and %p (pid) so each process can write its own file. */
        char name[512];
        size_t n = 0;
        for (const char *c = path; *c && n < sizeof(name) - 32; c++) {
            int w = 0;
            if (c[0] == '%' && c[1] == 'h') {
                w = snprintf(name + n, sizeof(name) - n, "%s", debug_host);
                c++;
            } else if (c[0] == '%' && c[1] == 'p') {
                w = snprintf(name + n, sizeof(name) - n, "%d", (int)getpid());
                c++;
            } else {
                name[n++] = *c;
            }
            /* snprintf returns what it would have written: a long host name stops at the end. */
            if (w > 0)
                n = n + (size_t)w < sizeof(name) - 1 ? n + (size_t)w : sizeof(name) - 1;
        }
        name[n] = '\0';
        FILE *f = fopen(name, "a");
        if (f == NULL) {
            snprintf(debug_init_error, sizeof(debug_init_error),
                     "environment variable CHORUS_DEBUG_FILE=\"%s\": cannot open %s for "
                     "appending",
                     path, name);
            debug_init_result = chorusInvalidArgument;
        } else {
            setvbuf(f, NULL, _IOLBF, 0);
            debug_file = f;
        }
    }
    if ((debug_level == LOG_VERSION || debug_level >= LOG_INFO) && (debug_subsys & SUB_INIT))
        debug_log(LOG_VERSION, SUB_INIT, __FILE__, __LINE__, "Chorus version %s",
                  CHORUS_VERSION_STRING);
    params_log_set();
}

chorusResult_t debug_init(void)
{
    pthread_once(&debug_once, debug_init_once);
    if (debug_init_result != chorusSuccess)
        return ERR(debug_init_result, SUB_ENV, "%s", debug_init_error);
    return chorusSuccess;
}

HOT_PATH void debug_set_rank(int rank)
{
    debug_rank = rank;
}

int debug_get_rank(void)
{
    return debug_rank;
}

static void debug_vlog(int level, unsigned subsys, const char *file, int line, const char *fmt,
                       va_list ap)
{
    static const char *level_names[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
    char buf[2048], host[sizeof(debug_host)];
    /* A line before the first communicator or id (debug_init) names the host too. */
    snprintf(host, sizeof(host), "%s", debug_host);
    if (host[0] == '\0' && gethostname(host, sizeof(host) - 1) == 0) {
        host[sizeof(host) - 1] = '\0';
        host[strcspn(host, ".")] = '\0';
    }
    int n = snprintf(buf, sizeof(buf), "%s:%d:%d [%d] CHORUS %s %s ", host, (int)getpid(),
                     (int)syscall(SYS_gettid), debug_rank, level_names[level], subsys_name(subsys));
    if (level == LOG_TRACE && n < (int)sizeof(buf))
        n += snprintf(buf + n, sizeof(buf) - n, "%s:%d ", file, line);
    if (n < (int)sizeof(buf))
        n += vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
    if (n >= (int)sizeof(buf) - 1)
        n = sizeof(buf) - 2;
    buf[n++] = '\n';
    fwrite(buf, 1, n, debug_file ? debug_file : stderr);
}

void debug_log(int level, unsigned subsys, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    debug_vlog(level, subsys, file, line, fmt, ap);
    va_end(ap);
}

chorusResult_t debug_error(chorusResult_t res, unsigned subsys, const char *file, int line,
                           const char *fmt, ...)
{
    /* Formatted aside first: an argument may be debug_last_error() itself (a cause wrapped in a
     * new sentence). */
    char text[sizeof(last_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    memcpy(last_error, text, sizeof(last_error));
    debug_has_error = 1;
    int level = quiet_errors ? LOG_INFO : LOG_WARN;
    if (debug_level >= level && (debug_subsys & subsys))
        debug_log(level, subsys, file, line, "%s", last_error);
    return res;
}

const char *debug_last_error(void)
{
    return last_error;
}

HOT_PATH void debug_clear_error(void)
{
    if (debug_has_error) {
        last_error[0] = '\0';
        debug_has_error = 0;
    }
}
