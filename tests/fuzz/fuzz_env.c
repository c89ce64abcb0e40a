/*
 * fuzz_env.c: every parser of a value a user types into the environment.
 *
 * Byte 0 picks a variable of the table (or a name outside it); the rest, up to its first NUL, is
 * the value. It goes through params_parse_text (what params_load and chorusCommInitEnv do with
 * it), the CHORUS_ALGO / CHORUS_PROTO parsers, and the CHORUS_SOCKET_IFNAME matcher
 * (sock_list_addrs, sock_pick_addr: they only read the interface list). What is accepted must
 * make sense: an integer prints back to itself, a string is copied whole, an algorithm mask is
 * not empty and names only known algorithms, a protocol mask allows Simple, an interface list has
 * at most the room it was given, each name terminated.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "params.h"
#include "socket.h"
#include "tuning.h"

static const char *const names[] = {
    "CHORUS_TIMEOUT_MS",
    "CHORUS_NCHANNELS",
    "CHORUS_MIN_NCHANNELS",
    "CHORUS_MAX_NCHANNELS",
    "CHORUS_BUFFSIZE",
    "CHORUS_P2P_BUFFSIZE",
    "CHORUS_STEPS",
    "CHORUS_SPIN",
    "CHORUS_NSOCKS_PERTHREAD",
    "CHORUS_SOCKET_NTHREADS",
    "CHORUS_NET_SPEED_MBPS",
    "CHORUS_RANK",
    "CHORUS_NRANKS",
    "RANK",
    "WORLD_SIZE",
    "MASTER_PORT",
    "CHORUS_SOCKET_IFNAME",
    "CHORUS_HOSTID",
    "CHORUS_ALGO",
    "CHORUS_PROTO",
    "CHORUS_ROOT",
    "CHORUS_DEBUG_FILE",
    "NOT_A_CHORUS_VARIABLE",
};
#define NNAMES ((int)(sizeof(names) / sizeof(names[0])))

static void check_param(const char *name, const char *text)
{
    int64_t v = INT64_MIN;
    char str[PARAM_STR_MAX];
    memset(str, 0x55, sizeof(str));
    if (params_parse_text(name, text, &v, str) != chorusSuccess)
        return;
    if (v == INT64_MIN) { /* a string variable */
        if (strlen(text) >= PARAM_STR_MAX || strcmp(str, text) != 0)
            fuzz_die("%s=\"%s\" accepted but copied as \"%.*s\"", name, text, PARAM_STR_MAX, str);
        return;
    }
    char back[32];
    int64_t v2 = INT64_MIN;
    snprintf(back, sizeof(back), "%" PRId64, v);
    if (params_parse_text(name, back, &v2, str) != chorusSuccess || v2 != v)
        fuzz_die("%s=\"%s\" gave %" PRId64 ", which does not parse back", name, text, v);
}

static void check_tuning(const char *text)
{
    unsigned masks[TUNE_NCOLLS];
    if (tune_parse_algo("CHORUS_ALGO", text, masks) == chorusSuccess)
        for (int c = 0; c < TUNE_NCOLLS; c++)
            if (masks[c] == 0 || (masks[c] & ~((1u << ALGO_COUNT) - 1)) != 0)
                fuzz_die("CHORUS_ALGO=\"%s\" accepted with mask 0x%x for collective %d", text,
                         masks[c], c);
    unsigned proto = 0;
    if (tune_parse_proto("CHORUS_PROTO", text, &proto) == chorusSuccess &&
        (!(proto & (1u << PROTO_SIMPLE)) || (proto & ~((1u << PROTO_COUNT) - 1)) != 0))
        fuzz_die("CHORUS_PROTO=\"%s\" accepted with mask 0x%x", text, proto);
}

static void check_ifname(const char *text)
{
    enum { MAX = 4, LEN = 16 };
    sock_addr_t addrs[MAX + 1];
    char ifnames[(MAX + 1) * LEN];
    memset(ifnames, 'x', sizeof(ifnames));
    int count = -1;
    if (sock_list_addrs(text, MAX, addrs, ifnames, LEN, &count) == chorusSuccess) {
        if (count < 0 || count > MAX)
            fuzz_die("CHORUS_SOCKET_IFNAME=\"%s\": %d interfaces listed in room for %d", text,
                     count, MAX);
        for (int i = 0; i < count; i++)
            if (memchr(ifnames + i * LEN, '\0', LEN) == NULL)
                fuzz_die("CHORUS_SOCKET_IFNAME=\"%s\": name %d not terminated", text, i);
        if (ifnames[MAX * LEN] != 'x')
            fuzz_die("CHORUS_SOCKET_IFNAME=\"%s\": wrote past the names' room", text);
    }
    sock_addr_t one;
    char ifname[LEN];
    if (sock_pick_addr(text, &one, ifname, sizeof(ifname)) == chorusSuccess &&
        memchr(ifname, '\0', sizeof(ifname)) == NULL)
        fuzz_die("CHORUS_SOCKET_IFNAME=\"%s\": picked name not terminated", text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    if (size == 0)
        return 0;
    const char *name = names[data[0] % NNAMES];
    /* Exactly the value's bytes on the heap: a read past its NUL is a sanitizer report. */
    size_t len = strnlen((const char *)data + 1, size - 1);
    char *text = malloc(len + 1);
    memcpy(text, data + 1, len);
    text[len] = '\0';
    check_param(name, text);
    check_tuning(text);
    if (data[0] & 0x40)
        check_ifname(text);
    free(text);
    return 0;
}
