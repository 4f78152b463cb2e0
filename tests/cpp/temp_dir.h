#pragma once
// A fresh directory under /tmp for a test, removed with everything in it at
// the end.

#include <dirent.h>
#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace mlprof::test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/mlprof-test-XXXXXX";
    if (::mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The names directly in it, without "." and "..".
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(path_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") out.push_back(name);
      }
      ::closedir(d);
    }
    return out;
  }

 private:
  std::string path_;
};

}  // namespace mlprof::test
