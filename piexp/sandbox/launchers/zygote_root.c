/* The zygote's read-only root, built once in its own user and mount namespaces (see
 * zygote.c for the layout and why): the only file of the zygote that mounts the host's
 * files into the sandbox; and die(), which both files call, so that zygote.c uses this
 * file and never the other way round. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "zygote.h"

void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "piexp-zygote: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, ": %s\n", strerror(errno));
  va_end(ap);
  _exit(1);
}

static int put(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n < 0 ? -1 : 0;
}

/* mkdir -p of `path` (absolute). */
static void mkdirs(const char *path, mode_t mode) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0755) < 0 && errno != EEXIST) die("mkdir %s", buf);
    *p = '/';
  }
  if (mkdir(buf, mode) < 0 && errno != EEXIST) die("mkdir %s", buf);
}

static void parent_dirs(const char *path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  char *slash = strrchr(buf, '/');
  if (slash && slash != buf) {
    *slash = 0;
    mkdirs(buf, 0755);
  }
}

/* Bind `src` read-only at `dst`, keeping the flags the source mount has (a user
 * namespace may not clear a locked nosuid/nodev/noexec). */
static void ro_bind(const char *src, const char *dst) {
  struct stat st;
  if (stat(src, &st) < 0) die("stat %s", src);
  parent_dirs(dst);
  if (S_ISDIR(st.st_mode)) {
    mkdirs(dst, 0755);
  } else {
    int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
    if (fd < 0) die("create %s", dst);
    close(fd);
  }
  if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0) die("bind %s", src);
  struct statvfs sv;
  unsigned long keep = 0;
  if (statvfs(dst, &sv) == 0) {
    if (sv.f_flag & ST_NOEXEC) keep |= MS_NOEXEC;
    if (sv.f_flag & ST_NODEV) keep |= MS_NODEV;
    if (sv.f_flag & ST_NOATIME) keep |= MS_NOATIME;
    if (sv.f_flag & ST_RELATIME) keep |= MS_RELATIME;
  }
  if (mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | keep, NULL) < 0)
    die("remount %s read-only", dst);
}

static void copy_file(const char *src, const char *dst) {
  char buf[1 << 16];
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) die("open %s", src);
  parent_dirs(dst);
  int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
  if (out < 0) die("create %s", dst);
  ssize_t n;
  while ((n = read(in, buf, sizeof buf)) > 0)
    if (write(out, buf, n) != n) die("write %s", dst);
  if (n < 0) die("read %s", src);
  close(in);
  close(out);
}

static void join(char *out, size_t size, const char *a, const char *b) {
  snprintf(out, size, "%s%s", a, b);
}

/* The read-only root, built at /newroot (the host is at /oldroot), then made the root. */
void build_root(int argc, char **argv) {
  const char *runs_dir = argv[2];
  char a[4096], b[4096];
  /* Slave, not private: mounts the server makes under RUNS_DIR (each run's tmpfs)
   * propagate in; nothing propagates back to the host. */
  if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) die("make / a slave");
  /* A scratch root so that the host tree can be addressed under /oldroot. */
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") < 0) die("mount scratch");
  mkdirs("/tmp/oldroot", 0755);
  mkdirs("/tmp/newroot", 0755);
  if (syscall(SYS_pivot_root, "/tmp", "/tmp/oldroot") < 0) die("pivot_root (scratch)");
  if (chdir("/") < 0) die("chdir /");
  if (mount("tmpfs", "/newroot", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m") < 0) die("mount root tmpfs");
  for (int i = 4; i + 2 < argc; i += 3) {
    const char *kind = argv[i], *x = argv[i + 1], *y = argv[i + 2];
    join(b, sizeof b, "/newroot", y);
    if (strcmp(kind, "B") == 0) {
      join(a, sizeof a, "/oldroot", x);
      ro_bind(a, b);
    } else if (strcmp(kind, "S") == 0) {
      parent_dirs(b);
      if (symlink(x, b) < 0) die("symlink %s", y);
    } else if (strcmp(kind, "F") == 0) {
      join(a, sizeof a, "/oldroot", x);
      copy_file(a, b);
    } else {
      errno = EINVAL;
      die("unknown layout kind %s", kind);
    }
  }
  /* /dev: the harmless device nodes, read-only; /dev/shm is the run's /tmp. */
  mkdirs("/newroot/dev", 0755);
  if (mount("tmpfs", "/newroot/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") < 0) die("mount /dev");
  static const char *nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
  for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++) {
    snprintf(a, sizeof a, "/oldroot/dev/%s", nodes[i]);
    snprintf(b, sizeof b, "/newroot/dev/%s", nodes[i]);
    int fd = open(b, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) die("create %s", b);
    close(fd);
    if (mount(a, b, NULL, MS_BIND, NULL) < 0) die("bind %s", a);
  }
  static const char *links[][2] = {{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
                                   {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
                                   {"/tmp", "shm"}};
  for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
    snprintf(b, sizeof b, "/newroot/dev/%s", links[i][1]);
    if (symlink(links[i][0], b) < 0) die("symlink %s", b);
  }
  if (mount(NULL, "/newroot/dev", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) < 0)
    die("remount /dev read-only");
  mkdirs("/newroot/proc", 0555);
  mkdirs("/newroot/tmp", 0755);
  mkdirs("/newroot/sandbox", 0755);
  mkdirs("/newroot/.runs", 0700);
  join(a, sizeof a, "/oldroot", runs_dir);
  if (mount(a, "/newroot/.runs", NULL, MS_BIND | MS_REC, NULL) < 0) die("bind %s", runs_dir);
  if (mount(NULL, "/newroot/.runs", NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
    die("remount %s", runs_dir);
  /* A fully visible proc must exist in a mount namespace before a user namespace may
   * mount a new one there (the kernel's mount_too_revealing): keep the host's, hidden
   * at /.proc; each run detaches it once its own /proc is mounted. */
  mkdirs("/newroot/.proc", 0700);
  if (mount("/oldroot/proc", "/newroot/.proc", NULL, MS_BIND | MS_REC, NULL) < 0) die("bind /proc");
  /* Swap roots: the scratch tmpfs and the host tree under it are detached. */
  if (chdir("/newroot") < 0) die("chdir /newroot");
  if (syscall(SYS_pivot_root, ".", ".") < 0) die("pivot_root");
  if (umount2(".", MNT_DETACH) < 0) die("detach the host's root");
  if (chdir("/") < 0) die("chdir /");
  if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
    die("remount / read-only");
}

void enter_user_namespace(void) {
  char line[64];
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) die("unshare user+mount");
  if (put("/proc/self/setgroups", "deny") < 0) die("setgroups deny");
  snprintf(line, sizeof line, "%d %d 1", SANDBOX_ID, uid);
  if (put("/proc/self/uid_map", line) < 0) die("uid_map");
  snprintf(line, sizeof line, "%d %d 1", SANDBOX_ID, gid);
  if (put("/proc/self/gid_map", line) < 0) die("gid_map");
  /* Per user namespace: no process in this one (every run) may create another. */
  if (put("/proc/sys/user/max_user_namespaces", "0") < 0) die("max_user_namespaces");
}

