#include "store/entry_origin.h"

#include "format/origin.h"
#include "store/layout.h"
#include "util/file_io.h"

namespace snapcache::store {

OriginRead read_origin(FileSystem& fs, const std::string& entry_path) {
  OriginRead read;
  auto bytes = read_own_file(fs, entry_path + "/" + kOriginFile, format::kMaxOriginBytes);
  if (!bytes) {
    if (bytes.status().code() != StatusCode::not_found) read.unreadable = bytes.status().message();
    return read;
  }
  auto origin = format::decode_origin(*bytes);
  if (!origin) {
    read.unreadable = origin.status().message();
    return read;
  }
  read.origin = std::move(*origin);
  return read;
}

}  // namespace snapcache::store
