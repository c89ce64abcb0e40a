/*
 * fuzz_frame.c: what an authenticated peer may send after its hello: a stream of frame headers
 * and payloads, through a rank's real listener and service thread.
 *
 * Byte 0 picks the sending rank (of FUZZ_NRANKS); the rest follows a valid hello. Every whole
 * frame with a known kind and at most BOOT_MAX_MSG bytes must arrive intact (queued, or handed to
 * the control callback), in order; the first bad header (unknown kind, a length over the limit
 * such as 2^31), a truncated header or a truncated payload ends the connection with an error, and
 * a stream that ends on a frame boundary ends it cleanly. Each header is also given to
 * boot_check_frame directly, at several limits.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_setup();
    if (size == 0)
        return 0;
    for (size_t off = 1; off + sizeof(frame_hdr_t) <= size; off += sizeof(frame_hdr_t)) {
        frame_hdr_t f;
        memcpy(&f, data + off, sizeof(f));
        const uint32_t max[] = {0, 64, BOOT_MAX_MSG, UINT32_MAX};
        for (int i = 0; i < 4; i++)
            if ((boot_check_frame(&f, max[i]) == NULL) != fuzz_frame_ok(&f, max[i]))
                fuzz_die("boot_check_frame (tag 0x%x, %u bytes, limit %u) disagrees with the "
                         "format",
                         f.tag, f.nbytes, max[i]);
    }
    peer_hello_t h = {BOOT_MAGIC, FUZZ_SECRET, data[0] % FUZZ_NRANKS, 0};
    uint8_t *stream = malloc(sizeof(h) + size - 1);
    memcpy(stream, &h, sizeof(h));
    memcpy(stream + sizeof(h), data + 1, size - 1);
    chorusResult_t res;
    sock_addr_t listen;
    boot_t *b = fuzz_boot_start(NULL, 0, &res, &listen);
    if (b == NULL)
        fuzz_die("init against a valid fake root failed");
    fuzz_listener_check(b, &listen, stream, sizeof(h) + size - 1);
    boot_close(b);
    free(stream);
    return 0;
}
