/* LD_PRELOAD shim for the tests: pread()/read() on a file whose path contains $STRATA_EIO_PATH
 * fail with EIO for bytes below $STRATA_EIO_BELOW (and at or above $STRATA_EIO_FROM, default 0),
 * as a disk with a bad sector in that range would. Everything else goes to libc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int bad_fd(int fd) {
  const char* want = getenv("STRATA_EIO_PATH");
  if (!want || !*want) return 0;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return strstr(path, want) != NULL;
}

static int bad_range(off_t offset) {
  const char* below = getenv("STRATA_EIO_BELOW");
  const char* from = getenv("STRATA_EIO_FROM");
  return below && offset < (off_t)strtoll(below, NULL, 10) && (!from || offset >= (off_t)strtoll(from, NULL, 10));
}

ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  static ssize_t (*real)(int, void*, size_t, off_t);
  if (!real) real = (ssize_t(*)(int, void*, size_t, off_t))dlsym(RTLD_NEXT, "pread");
  if (bad_range(offset) && bad_fd(fd)) {
    errno = EIO;
    return -1;
  }
  return real(fd, buf, count, offset);
}

ssize_t pread64(int fd, void* buf, size_t count, off_t offset) { return pread(fd, buf, count, offset); }

ssize_t read(int fd, void* buf, size_t count) {
  static ssize_t (*real)(int, void*, size_t);
  if (!real) real = (ssize_t(*)(int, void*, size_t))dlsym(RTLD_NEXT, "read");
  if (bad_fd(fd) && bad_range(lseek(fd, 0, SEEK_CUR))) {
    errno = EIO;
    return -1;
  }
  return real(fd, buf, count);
}
