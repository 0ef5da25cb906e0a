#include "model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace amk::model_detail {

MappedFile::MappedFile(MappedFile&& other) noexcept
    : addr_(std::exchange(other.addr_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (addr_) ::munmap(addr_, size_);
    addr_ = std::exchange(other.addr_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (addr_) ::munmap(addr_, size_);
}

MappedFile MappedFile::map(const std::filesystem::path& path, std::string* error) {
  MappedFile out;
  // O_NONBLOCK: opening a FIFO would otherwise wait forever for a writer; it is then refused as
  // not a regular file (the flag means nothing to the mapping of a regular one).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *error = fmt::format("cannot open: {}", std::strerror(errno));
    return out;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    *error = fmt::format("cannot stat: {}", std::strerror(errno));
    ::close(fd);
    return out;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = "not a regular file";
    ::close(fd);
    return out;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      *error = fmt::format("cannot map {} bytes: {}", size, std::strerror(errno));
      ::close(fd);
      return out;
    }
    out.addr_ = addr;
  }
  out.size_ = size;
  ::close(fd);  // the mapping keeps the file alive
  return out;
}

}  // namespace amk::model_detail
