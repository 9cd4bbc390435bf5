// The diff `review diff` prints: what a confined command changed in one file.
// Both the bytes and the name come from the command, so the text is one that
// `git apply` and GNU `patch -p1` apply exactly, a name can never break a
// header line, and a hostile file costs bounded time and memory.
@preconcurrency import Glibc
import SystemKit

public enum UnifiedDiff {
    /// What a diff of two versions of one file is.
    public enum Outcome: Equatable, Sendable {
        /// Same bytes under the same name.
        case identical
        /// A git-style unified diff, raw: content lines are the file's bytes
        /// (`printable` makes them safe for a terminal).
        case text([UInt8])
        /// A NUL byte in the first 8,000 bytes of either side (git's rule).
        case binary(summary: String)
        /// Over one of the `Limits`: the summary says which, and the sizes.
        case tooLarge(summary: String)
    }

    /// Bounds on the work one diff may cost. A diff costs about
    /// (old lines + new lines) × edit distance steps, so a cap on the edit
    /// distance alone would not bound the time: `maxSteps` caps the steps.
    public struct Limits: Equatable, Sendable {
        /// Bytes per side.
        public var maxBytes: Int
        /// Lines per side in the changed region (what lies between the
        /// common first and last lines), which is what the diff works on.
        public var maxLines: Int
        /// Steps of the Myers search (diagonals tried plus lines compared).
        public var maxSteps: Int

        public init(maxBytes: Int, maxLines: Int, maxSteps: Int) {
            self.maxBytes = maxBytes
            self.maxLines = maxLines
            self.maxSteps = maxSteps
        }

        /// 8 MiB, 200,000 lines, 30 million steps. The worst files measured
        /// (release build, 2-core VM) took 0.6 s, and 80 MB at the process's
        /// peak with both files and the diff held.
        public static let `default` = Limits(maxBytes: 8 << 20, maxLines: 200_000, maxSteps: 30_000_000)
    }

    /// The diff of one file. `old` nil: the file is added (diffed against
    /// /dev/null); `new` nil: it is deleted. The names are the paths inside
    /// the folder, as bytes; different names make a rename. There is no mode
    /// parameter, so added and deleted files are written as mode 100644.
    /// `context`: common lines shown around a change (at most `maxLines`).
    public static func make(
        old: [UInt8]?, new: [UInt8]?, oldName: [UInt8], newName: [UInt8],
        context: Int = 3, limits: Limits = .default
    ) -> Outcome {
        if old == nil && new == nil { return .identical }
        if old != nil && new != nil && old == new && oldName == newName { return .identical }
        let a = old ?? [], b = new ?? []
        // An added file has only its new name, a deleted one its old.
        let nameA = old == nil ? newName : oldName
        let nameB = new == nil ? oldName : newName
        let pathA = quoted(Array("a/".utf8) + nameA), pathB = quoted(Array("b/".utf8) + nameB)
        let labelA = old == nil ? Array("/dev/null".utf8) : pathA
        let labelB = new == nil ? Array("/dev/null".utf8) : pathB

        if isBinary(a) || isBinary(b) {
            return .binary(summary: "Binary files \(ascii(labelA)) and \(ascii(labelB)) differ (\(sizes(old, new)))")
        }
        if a.count > limits.maxBytes || b.count > limits.maxBytes {
            return .tooLarge(summary: tooLarge(pathA, old, new, "larger than \(limits.maxBytes) bytes"))
        }
        let hunks: [UInt8]
        do throws(DiffRefusal) {
            hunks = try Hunks.make(a, b, context: context, limits: limits)
        } catch {
            return .tooLarge(summary: tooLarge(pathA, old, new, error.reason))
        }

        var out = Array("diff --git ".utf8) + pathA + [0x20] + pathB + [0x0A]
        if old == nil { out += Array("new file mode 100644\n".utf8) }
        if new == nil { out += Array("deleted file mode 100644\n".utf8) }
        // GNU patch keeps an empty file that a hunkless patch deletes unless
        // the index line says so; git writes these two (e69de29: the empty blob).
        if old == nil && b.isEmpty { out += Array("index 0000000..e69de29\n".utf8) }
        if new == nil && a.isEmpty { out += Array("index e69de29..0000000\n".utf8) }
        if old != nil && new != nil && oldName != newName {
            out += Array("rename from ".utf8) + quoted(oldName) + [0x0A]
            out += Array("rename to ".utf8) + quoted(newName) + [0x0A]
        }
        // No hunks (an empty file added or deleted, a pure rename): git writes no ---/+++ either.
        if !hunks.isEmpty {
            out += Array("--- ".utf8) + labelA + [0x0A] + Array("+++ ".utf8) + labelB + [0x0A] + hunks
        }
        return .text(out)
    }

    // MARK: Names

    /// A path as git writes it in a header with core.quotePath on (quote.c,
    /// quote_c_style): in double quotes, with C escapes for \a \b \t \n \v \f
    /// \r, `\"`, `\\` and three-digit octal for every other control byte, DEL
    /// and every byte from 0x80, when any of those occurs. One more case than
    /// git: a name with a space is quoted too, since GNU patch drops a
    /// trailing space from an unquoted name, and `diff --git a/x y b/x y` is
    /// ambiguous once the two names differ. So a header is printable ASCII.
    static func quoted(_ path: [UInt8]) -> [UInt8] {
        guard path.contains(where: { $0 <= 0x20 || $0 >= 0x7F || $0 == 0x22 || $0 == 0x5C }) else { return path }
        var out: [UInt8] = [0x22]
        for byte in path {
            switch byte {
            case 0x07: out += [0x5C, UInt8(ascii: "a")]
            case 0x08: out += [0x5C, UInt8(ascii: "b")]
            case 0x09: out += [0x5C, UInt8(ascii: "t")]
            case 0x0A: out += [0x5C, UInt8(ascii: "n")]
            case 0x0B: out += [0x5C, UInt8(ascii: "v")]
            case 0x0C: out += [0x5C, UInt8(ascii: "f")]
            case 0x0D: out += [0x5C, UInt8(ascii: "r")]
            case 0x22, 0x5C: out += [0x5C, byte]
            case 0x00..<0x20, 0x7F...:
                out += [0x5C, 0x30 + (byte >> 6), 0x30 + (byte >> 3 & 7), 0x30 + (byte & 7)]
            default: out.append(byte)
            }
        }
        out.append(0x22)
        return out
    }

    /// `quoted` output is ASCII.
    private static func ascii(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    private static func sizes(_ old: [UInt8]?, _ new: [UInt8]?) -> String {
        switch (old, new) {
        case (nil, let new?): "added, \(new.count) bytes"
        case (let old?, nil): "deleted, \(old.count) bytes"
        default: "\(old?.count ?? 0) → \(new?.count ?? 0) bytes"
        }
    }

    private static func tooLarge(_ path: [UInt8], _ old: [UInt8]?, _ new: [UInt8]?, _ reason: String) -> String {
        "\(ascii(path)) is too large to diff (\(sizes(old, new)); \(reason)): "
            + "see it with `review list`, then accept or reject it"
    }

    /// git's buffer_is_binary: a NUL in the first 8,000 bytes.
    private static func isBinary(_ bytes: [UInt8]) -> Bool { bytes.prefix(8000).contains(0) }

    // MARK: Showing a diff on a terminal

    /// The diff with every byte that could drive a terminal or hide what it
    /// shows made visible, for printing: control bytes other than \n and \t
    /// (carriage returns too: a CRLF line ends in `\x0d`), DEL and bytes that
    /// are not UTF-8 become `\xNN`; scalars that `Printable` escapes (C1
    /// controls, bidirectional overrides, invisible format characters)
    /// become `\u{N}`. So that a file's own text `\x1b` is not read as an
    /// escape, a run of backslashes just before an `x`, a `u` or an escape is
    /// doubled: reading back, an even run there is literal backslashes, an
    /// odd one ends in an escape. Other backslashes (`\n` in code) stay as
    /// they are. Header lines are printable ASCII already (names are quoted).
    public static func printable(_ diff: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(diff.count)
        var index = 0
        while index < diff.count {
            let byte = diff[index]
            if byte == 0x09 || byte == 0x0A || (0x20..<0x7F).contains(byte) && byte != 0x5C {
                out.append(byte)  // the common case, without the lookup below
                index += 1
                continue
            }
            if byte == 0x5C {
                var end = index
                while end < diff.count && diff[end] == 0x5C { end += 1 }
                let run = end - index
                let next = end < diff.count ? diff[end] : 0x0A
                let doubled = next == UInt8(ascii: "x") || next == UInt8(ascii: "u") || shown(diff, at: end).escaped
                out += [UInt8](repeating: 0x5C, count: doubled ? 2 * run : run)
                index = end
                continue
            }
            let (bytes, length, _) = shown(diff, at: index)
            out += bytes
            index += length
        }
        return out
    }

    /// How the character at `index` is shown, how many bytes it takes, and
    /// whether it is shown escaped.
    private static func shown(_ bytes: [UInt8], at index: Int) -> (shown: [UInt8], length: Int, escaped: Bool) {
        guard index < bytes.count else { return ([], 0, false) }
        let byte = bytes[index]
        switch byte {
        case 0x09, 0x0A, 0x20..<0x7F: return ([byte], 1, false)
        case 0x00..<0x20, 0x7F: return (hexEscape(byte), 1, true)
        default:
            guard let length = utf8Length(bytes, at: index) else { return (hexEscape(byte), 1, true) }
            let sequence = Array(bytes[index..<index + length])
            // Printable decides which scalars are unsafe, for names and diffs alike.
            let shown = Array(Printable.path(bytes: sequence).utf8)
            return (shown, length, shown != sequence)
        }
    }

    private static func hexEscape(_ byte: UInt8) -> [UInt8] {
        let digits = Array("0123456789abcdef".utf8)
        return [0x5C, UInt8(ascii: "x"), digits[Int(byte >> 4)], digits[Int(byte & 0xF)]]
    }

    /// The length of the well-formed UTF-8 sequence of two to four bytes at
    /// `index` (no overlong forms, surrogates or values past U+10FFFF), or nil.
    private static func utf8Length(_ bytes: [UInt8], at index: Int) -> Int? {
        let lead = bytes[index]
        let length: Int
        var low: UInt8 = 0x80, high: UInt8 = 0xBF  // the allowed range of the second byte
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; low = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; high = 0x9F
        case 0xF0: length = 4; low = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; high = 0x8F
        default: return nil
        }
        guard index + length <= bytes.count, (low...high).contains(bytes[index + 1]) else { return nil }
        for offset in 2..<max(2, length) where bytes[index + offset] & 0xC0 != 0x80 { return nil }
        return length
    }
}

/// Why a diff was not made: over a limit.
struct DiffRefusal: Error {
    let reason: String
}

/// The hunks of a diff of `a` and `b`: the common first and last lines are
/// set aside, the lines between are compared with Myers' algorithm, and the
/// changes are written with `context` lines around them.
private enum Hunks {
    static func make(_ a: [UInt8], _ b: [UInt8], context: Int, limits: UnifiedDiff.Limits) throws(DiffRefusal) -> [UInt8] {
        let context = max(0, min(context, limits.maxLines))
        // Common first lines: the common bytes, back to the start of a line.
        var prefix = commonPrefix(a, b)
        while prefix > 0 && a[prefix - 1] != 0x0A { prefix -= 1 }
        // Common last lines: the common bytes not in the prefix, from the
        // start of a line in both (the byte before may differ).
        var suffix = commonSuffix(a, b, room: min(a.count, b.count) - prefix)
        func lineStart(_ x: [UInt8], _ index: Int) -> Bool { index == prefix || x[index - 1] == 0x0A }
        if suffix > 0 && !(lineStart(a, a.count - suffix) && lineStart(b, b.count - suffix)) {
            var index = a.count - suffix
            while index < a.count && a[index] != 0x0A { index += 1 }
            suffix = index < a.count ? a.count - index - 1 : 0
        }

        let middleA = lines(a, from: prefix, to: a.count - suffix, atMost: limits.maxLines)
        let middleB = lines(b, from: prefix, to: b.count - suffix, atMost: limits.maxLines)
        if middleA.count > limits.maxLines || middleB.count > limits.maxLines {
            throw DiffRefusal(reason: "more than \(limits.maxLines) changed lines")
        }
        if middleA.isEmpty && middleB.isEmpty { return [] }

        // The window the hunks are made in: the changed lines with up to
        // `context` common lines each side. The suffix has the same bytes in
        // both, at offsets that differ by the difference in size.
        var before: [Range<Int>] = []
        var end = prefix
        while before.count < context && end > 0 {
            var start = end - 1
            while start > 0 && a[start - 1] != 0x0A { start -= 1 }
            before.append(start..<end)
            end = start
        }
        before.reverse()
        let after = lines(a, from: a.count - suffix, to: a.count, atMost: context - 1)
        let shift = b.count - a.count
        let windowA = before + middleA + after
        let windowB = before + middleB + after.map { $0.lowerBound + shift..<$0.upperBound + shift }
        let firstLine = newlines(a, before: prefix) - before.count

        var matches = Array((0..<before.count).map { ($0, $0) })
        var search = Matching(a, middleA, b, middleB, limits: limits)
        matches += try search.matches().map { ($0.0 + before.count, $0.1 + before.count) }
        matches += (0..<after.count).map { (before.count + middleA.count + $0, before.count + middleB.count + $0) }
        return write(a, windowA, b, windowB, matches: matches, firstLine: firstLine, context: context)
    }

    /// The hunks, from the lines of both windows and their matched pairs (in order).
    static func write(_ a: [UInt8], _ linesA: [Range<Int>], _ b: [UInt8], _ linesB: [Range<Int>],
                      matches: [(Int, Int)], firstLine: Int, context: Int) -> [UInt8] {
        // Changed blocks: the lines between two matched pairs.
        var blocks: [(a: Range<Int>, b: Range<Int>)] = []
        var i = 0, j = 0
        for (x, y) in matches + [(linesA.count, linesB.count)] {
            if x > i || y > j { blocks.append((i..<x, j..<y)) }
            i = x + 1
            j = y + 1
        }
        // Blocks at most twice the context apart share a hunk (as git's xdl_get_hunk).
        var groups: [[(a: Range<Int>, b: Range<Int>)]] = []
        for block in blocks {
            if let last = groups.last?.last, block.a.lowerBound - last.a.upperBound <= 2 * context {
                groups[groups.count - 1].append(block)
            } else {
                groups.append([block])
            }
        }

        var out: [UInt8] = []
        func line(_ mark: UInt8, _ x: [UInt8], _ range: Range<Int>) {
            out.append(mark)
            out += x[range]
            if x[range.upperBound - 1] != 0x0A { out += Array("\n\\ No newline at end of file\n".utf8) }
        }
        for group in groups {
            let first = group[0], last = group[group.count - 1]
            // Lines around a block are common, in step on both sides.
            let lead = min(context, first.a.lowerBound)
            let trail = min(context, linesA.count - last.a.upperBound)
            let fromA = first.a.lowerBound - lead, fromB = first.b.lowerBound - lead
            let countA = last.a.upperBound + trail - fromA, countB = last.b.upperBound + trail - fromB
            out += Array("@@ -\(range(firstLine + fromA, countA)) +\(range(firstLine + fromB, countB)) @@\n".utf8)
            var common = fromA
            for block in group {
                for k in common..<block.a.lowerBound { line(0x20, a, linesA[k]) }
                for k in block.a { line(0x2D, a, linesA[k]) }
                for k in block.b { line(0x2B, b, linesB[k]) }
                common = block.a.upperBound
            }
            for k in common..<common + trail { line(0x20, a, linesA[k]) }
        }
        return out
    }

    /// A hunk header's range: the first line (1-based) and the count, the
    /// count left out when 1; an empty range names the line before it.
    static func range(_ start: Int, _ count: Int) -> String {
        switch count {
        case 0: "\(start),0"
        case 1: "\(start + 1)"
        default: "\(start + 1),\(count)"
        }
    }

    static func commonPrefix(_ a: [UInt8], _ b: [UInt8]) -> Int {
        a.withUnsafeBufferPointer { a in
            b.withUnsafeBufferPointer { b in
                let limit = min(a.count, b.count)
                var index = 0
                while index < limit && a[index] == b[index] { index += 1 }
                return index
            }
        }
    }

    static func commonSuffix(_ a: [UInt8], _ b: [UInt8], room: Int) -> Int {
        a.withUnsafeBufferPointer { a in
            b.withUnsafeBufferPointer { b in
                var length = 0
                while length < room && a[a.count - 1 - length] == b[b.count - 1 - length] { length += 1 }
                return length
            }
        }
    }

    /// The lines of x[from..<to], each with its "\n" (the last may have
    /// none), stopping once there are more than `atMost`.
    static func lines(_ x: [UInt8], from: Int, to: Int, atMost: Int) -> [Range<Int>] {
        var result: [Range<Int>] = []
        x.withUnsafeBufferPointer { x in
            var start = from
            while start < to && result.count <= atMost {
                var end = start
                while end < to && x[end] != 0x0A { end += 1 }
                end = min(end + 1, to)
                result.append(start..<end)
                start = end
            }
        }
        return result
    }

    static func newlines(_ x: [UInt8], before end: Int) -> Int {
        x.withUnsafeBufferPointer { x in
            var count = 0
            for index in 0..<end where x[index] == 0x0A { count += 1 }
            return count
        }
    }
}

/// The longest common subsequence of two lists of lines, by Myers' O(ND)
/// algorithm in linear space (the middle-snake bisection, as in
/// diff-match-patch), within a budget of steps.
private struct Matching {
    /// Lines as numbers: equal lines, equal numbers.
    private var a: [Int32] = [], b: [Int32] = []
    /// Where each of `a` and `b` is in the caller's lists: a line that the
    /// other side does not have cannot match, and is left out of the search.
    private var indexA: [Int] = [], indexB: [Int] = []
    private var steps = 0
    private let maxSteps: Int
    private var found: [(Int, Int)] = []

    /// `linesA`: ranges of `bytesA`, `linesB` of `bytesB`.
    init(_ bytesA: [UInt8], _ linesA: [Range<Int>], _ bytesB: [UInt8], _ linesB: [Range<Int>], limits: UnifiedDiff.Limits) {
        maxSteps = limits.maxSteps
        let (numbersA, numbersB, count) = Self.number(bytesA, linesA, bytesB, linesB)
        var inA = [Bool](repeating: false, count: count), inB = inA
        for n in numbersA { inA[Int(n)] = true }
        for n in numbersB { inB[Int(n)] = true }
        for (index, n) in numbersA.enumerated() where inB[Int(n)] {
            a.append(n)
            indexA.append(index)
        }
        for (index, n) in numbersB.enumerated() where inA[Int(n)] {
            b.append(n)
            indexB.append(index)
        }
    }

    /// Numbers for lines, equal for equal lines, and how many there are. An
    /// open-addressing table of numbers rather than a Dictionary of slices,
    /// which costs a retain and release per line and three times the time.
    /// Hasher is seeded per process, so a file cannot be made to collide.
    private static func number(_ bytesA: [UInt8], _ linesA: [Range<Int>], _ bytesB: [UInt8], _ linesB: [Range<Int>]) -> ([Int32], [Int32], Int) {
        var size = 16
        while size < 2 * (linesA.count + linesB.count) { size <<= 1 }
        var table = [Int32](repeating: -1, count: size)
        var hashes: [Int] = []
        var first: [(inB: Bool, range: Range<Int>)] = []
        var numbersA: [Int32] = [], numbersB: [Int32] = []
        numbersA.reserveCapacity(linesA.count)
        numbersB.reserveCapacity(linesB.count)
        bytesA.withUnsafeBytes { a in
            bytesB.withUnsafeBytes { b in
                func number(_ inB: Bool, _ range: Range<Int>) -> Int32 {
                    let line = UnsafeRawBufferPointer(rebasing: (inB ? b : a)[range])
                    var hasher = Hasher()
                    hasher.combine(bytes: line)
                    let hash = hasher.finalize()
                    var slot = hash & (size - 1)
                    while true {
                        let known = table[slot]
                        if known < 0 {
                            table[slot] = Int32(first.count)
                            hashes.append(hash)
                            first.append((inB, range))
                            return Int32(first.count - 1)
                        }
                        let other = first[Int(known)]
                        if hashes[Int(known)] == hash && other.range.count == range.count
                            && (range.isEmpty || memcmp(line.baseAddress!, (other.inB ? b : a).baseAddress! + other.range.lowerBound, range.count) == 0) {
                            return known
                        }
                        slot = (slot + 1) & (size - 1)
                    }
                }
                for range in linesA { numbersA.append(number(false, range)) }
                for range in linesB { numbersB.append(number(true, range)) }
            }
        }
        return (numbersA, numbersB, first.count)
    }

    /// The matched pairs, in order, as indices in the caller's lists.
    mutating func matches() throws(DiffRefusal) -> [(Int, Int)] {
        found = []
        try solve(0, a.count, 0, b.count)
        return found.map { (indexA[$0.0], indexB[$0.1]) }
    }

    private mutating func spend(_ count: Int) throws(DiffRefusal) {
        steps += count
        if steps > maxSteps { throw DiffRefusal(reason: "more than \(maxSteps) steps to compare") }
    }

    private mutating func solve(_ lowA: Int, _ highA: Int, _ lowB: Int, _ highB: Int) throws(DiffRefusal) {
        var lowA = lowA, lowB = lowB, highA = highA, highB = highB
        while lowA < highA && lowB < highB && a[lowA] == b[lowB] {
            found.append((lowA, lowB))
            lowA += 1
            lowB += 1
        }
        var common = 0
        while lowA < highA && lowB < highB && a[highA - 1] == b[highB - 1] {
            highA -= 1
            highB -= 1
            common += 1
        }
        try spend(1 + common)
        if lowA < highA && lowB < highB, let (x, y) = try bisect(lowA, highA, lowB, highB) {
            try solve(lowA, lowA + x, lowB, lowB + y)
            try solve(lowA + x, highA, lowB + y, highB)
        }
        for k in 0..<common { found.append((highA + k, highB + k)) }
    }

    /// A point on a shortest edit path of a[lowA..<highA] and b[lowB..<highB]
    /// (relative to their starts), where the forward and backward searches meet.
    private mutating func bisect(_ lowA: Int, _ highA: Int, _ lowB: Int, _ highB: Int) throws(DiffRefusal) -> (Int, Int)? {
        let n = highA - lowA, m = highB - lowB
        let maxD = (n + m + 1) / 2
        let offset = maxD, length = 2 * maxD + 2
        var forward = [Int](repeating: -1, count: length), backward = forward
        steps += length  // filling them is work too
        forward[offset + 1] = 0
        backward[offset + 1] = 0
        let delta = n - m
        // With an odd delta the paths meet during a forward step, else during a backward one.
        let odd = delta & 1 != 0
        var steps = self.steps
        let maxSteps = self.maxSteps
        enum Result { case meet(Int, Int), none, overBudget }
        // Buffers, not arrays: this loop is the whole cost of a large diff.
        let result = a.withUnsafeBufferPointer { a in
            b.withUnsafeBufferPointer { b in
                forward.withUnsafeMutableBufferPointer { forward in
                    backward.withUnsafeMutableBufferPointer { backward -> Result in
                        var startF = 0, endF = 0, startB = 0, endB = 0
                        for d in 0..<maxD {
                            // Checked once per d: a d costs at most 2d + 1 diagonals plus n + m lines.
                            if steps > maxSteps { return .overBudget }
                            var k = -d + startF
                            while k <= d - endF {
                                let i = offset + k
                                var x = k == -d || (k != d && forward[i - 1] < forward[i + 1]) ? forward[i + 1] : forward[i - 1] + 1
                                var y = x - k
                                let x0 = x
                                while x < n && y < m && a[lowA + x] == b[lowB + y] {
                                    x += 1
                                    y += 1
                                }
                                steps += 1 + x - x0
                                forward[i] = x
                                if x > n {
                                    endF += 2  // off the right edge
                                } else if y > m {
                                    startF += 2  // off the bottom edge
                                } else if odd {
                                    let j = offset + delta - k
                                    if j >= 0 && j < length && backward[j] != -1 && x >= n - backward[j] { return .meet(x, y) }
                                }
                                k += 2
                            }
                            k = -d + startB
                            while k <= d - endB {
                                let i = offset + k
                                var x = k == -d || (k != d && backward[i - 1] < backward[i + 1]) ? backward[i + 1] : backward[i - 1] + 1
                                var y = x - k
                                let x0 = x
                                while x < n && y < m && a[highA - 1 - x] == b[highB - 1 - y] {
                                    x += 1
                                    y += 1
                                }
                                steps += 1 + x - x0
                                backward[i] = x
                                if x > n {
                                    endB += 2
                                } else if y > m {
                                    startB += 2
                                } else if !odd {
                                    let j = offset + delta - k
                                    if j >= 0 && j < length && forward[j] != -1 && forward[j] >= n - x {
                                        return .meet(forward[j], offset + forward[j] - j)
                                    }
                                }
                                k += 2
                            }
                        }
                        // Not reached for two non-empty lists; without a meeting point nothing matches.
                        return .none
                    }
                }
            }
        }
        self.steps = steps
        switch result {
        case .meet(let x, let y): return (x, y)
        case .none: return nil
        case .overBudget: throw DiffRefusal(reason: "more than \(maxSteps) steps to compare")
        }
    }
}
