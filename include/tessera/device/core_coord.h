// CoreCoord, CoreRange and CoreRangeSet: logical cores of a device's grid.
// A range is inclusive on both ends, as in the original.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/base/status.h"

namespace tessera {

struct CoreCoord {
  uint32_t x = 0;
  uint32_t y = 0;
  auto operator<=>(const CoreCoord&) const = default;
  std::string to_string() const { return fmt::format("({},{})", x, y); }
};

struct CoreRange {
  CoreCoord start;
  CoreCoord end;  // inclusive
  CoreRange() = default;
  CoreRange(CoreCoord s, CoreCoord e) : start(s), end(e) {}
  explicit CoreRange(CoreCoord single) : start(single), end(single) {}
  bool operator==(const CoreRange&) const = default;
  uint32_t width() const { return end.x - start.x + 1; }
  uint32_t height() const { return end.y - start.y + 1; }
  uint32_t num_cores() const { return width() * height(); }
  bool contains(CoreCoord c) const { return c.x >= start.x && c.x <= end.x && c.y >= start.y && c.y <= end.y; }
  bool intersects(const CoreRange& o) const {
    return !(o.end.x < start.x || o.start.x > end.x || o.end.y < start.y || o.start.y > end.y);
  }
  std::string to_string() const { return fmt::format("[{}-{}]", start.to_string(), end.to_string()); }
};

class CoreRangeSet {
 public:
  CoreRangeSet() = default;
  // Ranges may not overlap and each must have start <= end; see validate().
  CoreRangeSet(std::vector<CoreRange> ranges) : ranges_(std::move(ranges)) {}  // NOLINT
  CoreRangeSet(CoreRange r) : ranges_{r} {}                                    // NOLINT

  const std::vector<CoreRange>& ranges() const { return ranges_; }
  uint32_t num_cores() const;
  bool contains(CoreCoord c) const;
  CoreRange bounding_box() const;
  // Cores in shard order: range by range; inside a range row by row
  // (row_major) or column by column.
  std::vector<CoreCoord> cores(bool row_major = true) const;
  Status validate() const;
  bool operator==(const CoreRangeSet&) const = default;
  std::string to_string() const;

 private:
  std::vector<CoreRange> ranges_;
};

// The first `num_cores` cores of a grid of `grid` (x columns, y rows), row by
// row (row_wise) or column by column, as full rows (columns) plus one partial
// one: the original's num_cores_to_corerangeset. INVALID_ARGUMENT when the
// grid holds fewer cores.
StatusOr<CoreRangeSet> num_cores_to_corerangeset(uint32_t num_cores, CoreCoord grid, bool row_wise = true);

}  // namespace tessera
