/* Pi's shell (`shellPath` in its settings.json), compiled on the machine it runs on: Pi
 * runs `<shell> -c <command>` for each bash call. This asks piexp, over the episode's
 * command socket, to run the command in a sandbox of its own (its own pid, mount and
 * network namespaces and cgroup, beside Pi's, never inside it: piexp.harness.pi.commands),
 * and relays its output and exit code to Pi. When Pi kills it (a bash timeout, an abort),
 * the socket closes and piexp kills the command's sandbox.
 *
 * The same protocol as shell.cjs, its fallback where no C compiler is found, without a
 * node start per command: one JSON line {"command": ..., "env": {...}} (the command as
 * UTF-8, an invalid sequence as U+FFFD, as node decodes its argv), then frames of one byte
 * of kind (1 stdout, 2 stderr, 3 exit code), four of length (big-endian), the payload. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SOCKET_PATH "/run/piexp/commands.sock"

typedef struct {
    char *data;
    size_t size, capacity;
} buffer;

static void append(buffer *out, const char *bytes, size_t count) {
    if (out->size + count > out->capacity) {
        size_t capacity = out->capacity ? out->capacity : 256;
        while (capacity < out->size + count) capacity *= 2;
        char *grown = realloc(out->data, capacity);
        if (grown == NULL) {
            fputs("piexp: out of memory in Pi's shell\n", stderr);
            exit(255);
        }
        out->data = grown;
        out->capacity = capacity;
    }
    memcpy(out->data + out->size, bytes, count);
    out->size += count;
}

/* The UTF-8 sequence at `s`: its length when valid (*valid = 1), else the length of its
 * longest valid start, at least 1, which node's decoder replaces by one U+FFFD (the
 * WHATWG "maximal subpart" rule). */
static size_t utf8_sequence(const unsigned char *s, size_t left, int *valid) {
    unsigned char c = s[0], low = 0x80, high = 0xbf;
    size_t length;
    *valid = 1;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) length = 2;
    else if (c >= 0xe0 && c <= 0xef) length = 3, low = c == 0xe0 ? 0xa0 : 0x80, high = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) length = 4, low = c == 0xf0 ? 0x90 : 0x80, high = c == 0xf4 ? 0x8f : 0xbf;
    else return *valid = 0, 1;
    for (size_t i = 1; i < length; i++) {
        if (i >= left || s[i] < low || s[i] > high) return *valid = 0, i;
        low = 0x80, high = 0xbf;
    }
    return length;
}

static void json_string(buffer *out, const char *text) {
    const unsigned char *s = (const unsigned char *)text;
    size_t left = strlen(text);
    append(out, "\"", 1);
    while (left > 0) {
        int valid;
        size_t length = utf8_sequence(s, left, &valid);
        char escaped[8];
        if (!valid) {
            append(out, "\xef\xbf\xbd", 3);  /* U+FFFD */
        } else if (*s == '"' || *s == '\\') {
            escaped[0] = '\\', escaped[1] = (char)*s;
            append(out, escaped, 2);
        } else if (*s < 0x20) {
            snprintf(escaped, sizeof escaped, "\\u%04x", *s);
            append(out, escaped, 6);
        } else {
            append(out, (const char *)s, length);
        }
        s += length;
        left -= length;
    }
    append(out, "\"", 1);
}

static int write_all(int fd, const char *bytes, size_t count) {
    while (count > 0) {
        ssize_t done = write(fd, bytes, count);
        if (done < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        bytes += done;
        count -= (size_t)done;
    }
    return 0;
}

int main(int argc, char **argv) {
    static const char *names[] = {"PI_SESSION_ID", "PI_PROVIDER", "PI_MODEL", "PI_REASONING_LEVEL"};
    signal(SIGPIPE, SIG_IGN);
    buffer request = {0};
    append(&request, "{\"command\": ", 12);
    json_string(&request, argc > 1 ? argv[argc - 1] : "");
    append(&request, ", \"env\": {", 10);
    int first = 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *value = getenv(names[i]);
        if (value == NULL || *value == '\0') continue;
        if (!first) append(&request, ", ", 2);
        first = 0;
        json_string(&request, names[i]);
        append(&request, ": ", 2);
        json_string(&request, value);
    }
    append(&request, "}}\n", 3);

    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, SOCKET_PATH, sizeof address.sun_path - 1);
    if (sock < 0 || connect(sock, (struct sockaddr *)&address, sizeof address) != 0 ||
        write_all(sock, request.data, request.size) != 0) {
        fprintf(stderr, "piexp: the command runner is unreachable: %s\n", strerror(errno));
        return 255;
    }

    buffer pending = {0};
    char chunk[65536];
    int exit_code = -1;
    for (;;) {
        ssize_t got = read(sock, chunk, sizeof chunk);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        append(&pending, chunk, (size_t)got);
        size_t at = 0;
        while (pending.size - at >= 5) {
            const unsigned char *head = (const unsigned char *)pending.data + at;
            uint32_t size = ((uint32_t)head[1] << 24) | ((uint32_t)head[2] << 16) | ((uint32_t)head[3] << 8) | head[4];
            if (pending.size - at - 5 < size) break;
            const char *payload = pending.data + at + 5;
            if (head[0] == 1) write_all(STDOUT_FILENO, payload, size);
            else if (head[0] == 2) write_all(STDERR_FILENO, payload, size);
            else if (head[0] == 3) {
                char text[16] = {0};
                memcpy(text, payload, size < sizeof text - 1 ? size : sizeof text - 1);
                exit_code = atoi(text);
            }
            at += 5 + size;
        }
        memmove(pending.data, pending.data + at, pending.size - at);
        pending.size -= at;
    }
    if (exit_code < 0) {
        fputs("piexp: the command runner closed before the command ended\n", stderr);
        return 255;
    }
    return exit_code;
}
