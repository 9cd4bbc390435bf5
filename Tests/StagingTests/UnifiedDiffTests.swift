import Foundation
import Testing
@testable import Staging

/// `review diff`'s diffs are checked by applying them: with `git apply`, with
/// GNU `patch -p1`, and with a strict applier here that takes every hunk at
/// exactly the lines its header names (both tools would apply a hunk whose
/// line numbers are off, at an offset).
@Suite struct UnifiedDiffTests {
    // MARK: Agreement with git

    /// The same text as `git diff` (less its `index` lines and the function
    /// names after `@@`), names quoted as git quotes them included.
    @Test func diffsAreWhatGitDiffWrites() throws {
        let ten = numbered(1...10)
        var cases: [Case] = [
            Case("middle", ten, numbered(1...10, [5: "five"])),
            // Changes 6 lines apart share a hunk (2 × 3 context), 7 apart do not.
            Case("six-apart", ten, numbered(1...10, [2: "two", 9: "nine"])),
            Case("seven-apart", numbered(1...12), numbered(1...12, [2: "two", 10: "ten"])),
            Case("first-and-last", ten, "0\n" + ten + "11\n"),
            Case("newline-lost", ten, String(ten.dropLast())),
            Case("newline-gained", String(ten.dropLast()), ten),
            Case("last-line-changed-no-newline", String(ten.dropLast()), numbered(1...9) + "ten"),
            Case("context-no-newline", "a\nb\nc\nd\ne", "a\nB\nc\nd\ne"),
            Case("crlf", "one\r\ntwo\r\nthree\r\n", "one\r\nTWO\r\nthree\r\n"),
            Case("to-crlf", "one\ntwo\n", "one\r\ntwo\r\n"),
            Case("emptied", ten, ""),
            Case("filled", "", ten),
            Case("added", nil, ten),
            Case("deleted", ten, nil),
            Case("added-empty", nil, ""),
            Case("deleted-empty", "", nil),
            Case("content-like-headers", "x\n", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n\\ No newline at end of file\n"),
        ]
        // Every name git quotes (no spaces: git leaves those bare, this quotes them).
        for (index, name) in Self.quotedNames.enumerated() {
            cases.append(Case(name, "keep\nold \(index)\n", "keep\nnew \(index)\n"))
        }
        cases.sort { $0.newName.lexicographicallyPrecedes($1.newName) }  // git's order

        let repo = try Scratch()
        try repo.git(["init", "-q"])
        for item in cases { if let old = item.old { try repo.write(old, item.oldName) } }
        try repo.git(["add", "-A"])
        try repo.git(["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "old"])
        for item in cases {
            if item.old != nil { try repo.remove(item.oldName) }
            if let new = item.new { try repo.write(new, item.newName) }
        }
        try repo.git(["add", "-A"])
        let gits = try repo.git(["diff", "--cached", "--no-renames", "--no-color", "--no-ext-diff", "--diff-algorithm=myers"]).output
        let expected = gits.split(separator: 0x0A, omittingEmptySubsequences: false)
            .filter { !$0.starts(with: Array("index ".utf8)) }
            .map { line -> ArraySlice<UInt8> in
                guard line.starts(with: Array("@@ ".utf8)), let end = find(Array(" @@".utf8), in: Array(line.dropFirst(2))) else { return line }
                return line.prefix(end + 5)
            }
            .joined(separator: [0x0A])
        var ours: [UInt8] = []
        for item in cases { ours += try item.text() }
        // The empty files keep one index line each: GNU patch needs it (below).
        let emptyIndexLines = ["index 0000000..e69de29\n", "index e69de29..0000000\n"].map { Array($0.utf8) }
        for line in emptyIndexLines { ours = remove(line, from: ours) }
        #expect(String(decoding: ours, as: UTF8.self) == String(decoding: Array(expected), as: UTF8.self))
        #expect(ours == Array(expected))
    }

    // MARK: Applying

    @Test func handMadeCasesApplyWithGitPatchAndExactly() throws {
        let ten = numbered(1...10)
        try check([
            Case("plain", ten, numbered(1...10, [5: "five"])),
            Case("crlf", "one\r\ntwo\r\nthree", "one\r\nTWO\r\nthree\r\n"),
            Case("cr-inside", "a\rb\nc\n", "a\rB\nc\n"),
            Case("emptied", ten, ""),
            Case("filled", "", ten),
            Case("added", nil, ten),
            Case("deleted", ten, nil),
            Case("added-empty", nil, ""),
            Case("deleted-empty", "", nil),
            Case("added-no-newline", nil, "x"),
            Case("deleted-no-newline", "x", nil),
            Case("same", ten, ten),
            Case("renamed", ten, ten, newName: "renamed-to"),
            Case("renamed-changed", ten, ten + "11\n", newName: "renamed-changed-to"),
            Case("content-like-headers", "x\n-- a/x\n", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n\\ No newline at end of file\ndiff --git a/y b/y\n"),
            Case("escape-in-content", "a\n", "\u{1B}]0;title\u{07}\u{1B}[2J\n"),
        ])
    }

    /// Names that could break a header line or be read as another file: each
    /// changed, added, deleted and renamed, applied by both tools to the
    /// right file, with header lines that are printable ASCII.
    @Test func hostileNamesApplyToTheRightFile() throws {
        var cases: [Case] = []
        for (index, name) in (Self.quotedNames + Self.spacedNames).enumerated() {
            cases.append(Case(name, "keep\nold\n", "keep\nnew\n"))
            cases.append(Case(nil, "added \(index)\n", oldName: [], newName: Array("added-".utf8) + name))
            cases.append(Case("deleted \(index)\n", nil, oldName: Array("deleted-".utf8) + name, newName: []))
            cases.append(Case("moved \(index)\n", "moved \(index)\n", oldName: Array("from-".utf8) + name, newName: Array("to-".utf8) + name))
        }
        cases.append(Case("keep\n", "kept\n", oldName: Array("sub dir/in\tner".utf8), newName: Array("sub dir/in\tner".utf8)))
        try check(cases)

        for item in cases {
            let text = try item.text()
            let hunks = find(Array("\n@@ ".utf8), in: text)
            let header = text.prefix(hunks.map { $0 + 1 } ?? text.count)
            #expect(header.allSatisfy { (0x20...0x7E).contains($0) || $0 == 0x0A }, "\(text)")
            // No line was injected: diff --git, a mode line or two rename lines, then --- and +++.
            let renamed = item.old != nil && item.new != nil && item.oldName != item.newName
            let lines = 1 + (item.old == nil || item.new == nil ? 1 : 0) + (renamed ? 2 : 0) + (hunks == nil ? 0 : 2)
            #expect(header.filter { $0 == 0x0A }.count == lines, "\(String(decoding: header, as: UTF8.self))")
        }
        // git's own quoting (checked against git in diffsAreWhatGitDiffWrites), and the space case.
        let quoted: [(String, String)] = [
            ("na\nme", #""a/na\nme""#), ("ta\tb", #""a/ta\tb""#), ("esc\u{1B}[31m", #""a/esc\033[31m""#),
            ("quo\"te", #""a/quo\"te""#), ("back\\slash", #""a/back\\slash""#), ("caf\u{E9}", #""a/caf\303\251""#),
            ("del\u{7F}", #""a/del\177""#), ("bell\u{07}", #""a/bell\a""#), ("end ", #""a/end ""#), ("plain", "a/plain"),
        ]
        for (name, expected) in quoted {
            #expect(String(decoding: UnifiedDiff.quoted(Array("a/".utf8) + Array(name.utf8)), as: UTF8.self) == expected)
        }
        #expect(UnifiedDiff.quoted(Array("a/f".utf8) + [0xFF, 0xFE]) == Array(#""a/f\377\376""#.utf8))
    }

    /// Seeded random pairs of files made of lines that are alike, look like
    /// diff syntax, end in CRLF or lack the last newline; each diff must
    /// apply with both tools and exactly, and be minimal (as many changed
    /// lines as the longest common subsequence leaves).
    @Test(arguments: [(1, 3), (2, 3), (3, 1), (4, 0), (5, 5)])
    func randomPairsRoundTrip(seed: UInt64, context: Int) throws {
        var random = SplitMix(seed: seed)
        let pool: [[UInt8]] = [
            "a\n", "b\n", "c\n", "a\r\n", "\n", " \n", "\r\n", "tab\there\n", "\u{1B}[31mred\u{1B}[0m\n",
            "-- a/x\n", "++ b/x\n", "@@ -1 +1 @@\n", "diff --git a/x b/x\n", "\\ No newline at end of file\n",
            "caf\u{E9}\n", "\u{202E}evil\n", "a\rb\n",
        ].map { Array($0.utf8) } + [[0xFF, 0xFE, 0x0A], [0xC3, 0x0A]]
        var cases: [Case] = []
        for index in 0..<150 {
            let linesOld = (0..<random.below(14)).map { _ in pool[random.below(pool.count)] }
            var linesNew = linesOld
            for _ in 0..<random.below(5) {
                switch random.below(3) {
                case 0: linesNew.insert(pool[random.below(pool.count)], at: random.below(linesNew.count + 1))
                case 1 where !linesNew.isEmpty: linesNew.remove(at: random.below(linesNew.count))
                default: if !linesNew.isEmpty { linesNew[random.below(linesNew.count)] = pool[random.below(pool.count)] }
                }
            }
            func file(_ lines: [[UInt8]]) -> [UInt8] {
                var bytes = Array(lines.joined())
                if random.below(4) == 0 && bytes.last == 0x0A { bytes.removeLast() }
                return bytes
            }
            let old = file(linesOld), new = file(linesNew)
            var name = Array("r\(index)".utf8)
            if index % 7 == 0 { name += Array(" \u{1B}\n\t\"\\".utf8) + [0xFF] }
            switch random.below(10) {
            case 0: cases.append(Case(old: nil, new: new, oldName: [], newName: name))
            case 1: cases.append(Case(old: old, new: nil, oldName: name, newName: []))
            case 2: cases.append(Case(old: old, new: new, oldName: name, newName: name + Array("-renamed".utf8)))
            default: cases.append(Case(old: old, new: new, oldName: name, newName: name))
            }
        }
        try check(cases, context: context)

        for item in cases {
            guard case .text(let text) = item.outcome(context: context) else { continue }
            let (removed, added) = changedLines(text)
            let common = longestCommonSubsequence(splitLines(item.old ?? []), splitLines(item.new ?? []))
            #expect(removed == splitLines(item.old ?? []).count - common, "not minimal:\n\(String(decoding: text, as: UTF8.self))")
            #expect(added == splitLines(item.new ?? []).count - common)
        }
    }

    // MARK: Outcomes other than text

    @Test func sameBytesUnderTheSameNameAreIdentical() {
        #expect(UnifiedDiff.make(old: Array("a\n".utf8), new: Array("a\n".utf8), oldName: Array("x".utf8), newName: Array("x".utf8)) == .identical)
        #expect(UnifiedDiff.make(old: [], new: [], oldName: Array("x".utf8), newName: Array("x".utf8)) == .identical)
        // Added empty, and moved: not identical.
        #expect(UnifiedDiff.make(old: nil, new: [], oldName: Array("x".utf8), newName: Array("x".utf8)) != .identical)
        #expect(UnifiedDiff.make(old: [], new: [], oldName: Array("x".utf8), newName: Array("y".utf8)) != .identical)
    }

    /// git's rule: a NUL in the first 8,000 bytes of either side.
    @Test func aNulInTheFirst8000BytesIsBinary() {
        let text = [UInt8](repeating: UInt8(ascii: "t"), count: 9000)
        var early = text
        early[7999] = 0
        var late = text
        late[8000] = 0
        let name = Array("na\nme".utf8)
        #expect(UnifiedDiff.make(old: text, new: early, oldName: name, newName: name)
            == .binary(summary: #"Binary files "a/na\nme" and "b/na\nme" differ (9000 → 9000 bytes)"#))
        #expect(UnifiedDiff.make(old: early, new: text + [0x0A], oldName: name, newName: name)
            == .binary(summary: #"Binary files "a/na\nme" and "b/na\nme" differ (9000 → 9001 bytes)"#))
        #expect(UnifiedDiff.make(old: nil, new: [0, 1, 2], oldName: [], newName: Array("x".utf8))
            == .binary(summary: "Binary files /dev/null and b/x differ (added, 3 bytes)"))
        #expect(UnifiedDiff.make(old: [0], new: nil, oldName: Array("x".utf8), newName: [])
            == .binary(summary: "Binary files a/x and /dev/null differ (deleted, 1 bytes)"))
        guard case .text = UnifiedDiff.make(old: text, new: late, oldName: name, newName: name) else {
            Issue.record("a NUL past byte 8,000 made the file binary")
            return
        }
    }

    @Test func overALimitIsTooLargeAndSaysWhy() throws {
        let name = Array("big\u{1B}".utf8)
        let small = UnifiedDiff.Limits(maxBytes: 10, maxLines: 3, maxSteps: 1_000)
        guard case .tooLarge(let summary) = UnifiedDiff.make(old: Array("0123456789\n".utf8), new: Array("x\n".utf8), oldName: name, newName: name, limits: small) else {
            Issue.record("11 bytes against a limit of 10 were diffed")
            return
        }
        #expect(summary == #""a/big\033" is too large to diff (11 → 2 bytes; larger than 10 bytes): see it with `review list`, then accept or reject it"#)

        // The line limit is on the changed lines: 4 of them are too many...
        let lineLimit = UnifiedDiff.Limits(maxBytes: 1 << 20, maxLines: 3, maxSteps: 1_000_000)
        guard case .tooLarge(let overLines) = UnifiedDiff.make(old: Array("a\nb\nc\nd\n".utf8), new: Array("1\n2\n3\n4\n".utf8), oldName: name, newName: name, limits: lineLimit) else {
            Issue.record("4 changed lines against a limit of 3 were diffed")
            return
        }
        #expect(overLines.contains("more than 3 changed lines"))
        // ...but any number of common lines around one changed line are not.
        let one = try #require(textOf(UnifiedDiff.make(old: Array(numbered(1...1000).utf8), new: Array(numbered(1...1000, [500: "x"]).utf8), oldName: name, newName: name, limits: lineLimit)))
        #expect(String(decoding: one, as: UTF8.self).contains("@@ -497,7 +497,7 @@\n 497\n 498\n 499\n-500\n+x\n 501\n"))

        // Steps: a search that needs more than the budget stops.
        var random = SplitMix(seed: 9)
        let old = (0..<400).map { _ in random.below(2) == 0 ? "a\n" : "b\n" }.joined()
        let new = (0..<400).map { _ in random.below(2) == 0 ? "a\n" : "b\n" }.joined()
        let budget = UnifiedDiff.Limits(maxBytes: 1 << 20, maxLines: 1000, maxSteps: 5_000)
        guard case .tooLarge(let steps) = UnifiedDiff.make(old: Array(old.utf8), new: Array(new.utf8), oldName: name, newName: name, limits: budget) else {
            Issue.record("a search of 800 lines of a and b fit in 5,000 steps")
            return
        }
        #expect(steps.contains("more than 5000 steps"))
        #expect(textOf(UnifiedDiff.make(old: Array(old.utf8), new: Array(new.utf8), oldName: name, newName: name)) != nil)
    }

    /// Hostile files of the default limits' size end within a bound (the
    /// default limits keep them under 1 s in a release build; debug builds
    /// are about five times slower, hence the generous 10 s).
    @Test func hostileFilesAreBoundedInTime() throws {
        let name = Array("hostile".utf8)
        var random = SplitMix(seed: 7)
        let eightMiB = 8 << 20
        let alternating = repeating(Array("a\nb\n".utf8), toFill: eightMiB)
        let shifted = repeating(Array("b\na\n".utf8), toFill: eightMiB)
        var oneChanged = alternating
        oneChanged[eightMiB / 2] = UInt8(ascii: "c")
        let randomOld = (0..<200_000).flatMap { _ in random.below(2) == 0 ? [UInt8(ascii: "a"), 0x0A] : [UInt8(ascii: "b"), 0x0A] }
        let randomNew = (0..<200_000).flatMap { _ in random.below(2) == 0 ? [UInt8(ascii: "a"), 0x0A] : [UInt8(ascii: "b"), 0x0A] }
        let vocabulary = (0..<2000).map { Array("line \($0) \(String(repeating: "x", count: $0 % 37))\n".utf8) }
        let wordsOld = (0..<150_000).flatMap { _ in vocabulary[random.below(vocabulary.count)] }
        let wordsNew = (0..<150_000).flatMap { _ in vocabulary[random.below(vocabulary.count)] }

        let runs: [(String, [UInt8], [UInt8], Bool)] = [
            ("8 MiB of alternating lines, shifted by one", alternating, shifted, false),
            ("8 MiB of alternating lines, one changed", alternating, oneChanged, true),
            ("200,000 random lines a or b", randomOld, randomNew, false),
            ("150,000 lines of 2,000 kinds", wordsOld, wordsNew, false),
        ]
        for (label, old, new, fits) in runs {
            // The thread's CPU time, which other tests running at once do not inflate.
            let cpuBefore = threadSeconds()
            let clock = ContinuousClock()
            var outcome = UnifiedDiff.Outcome.identical
            let elapsed = clock.measure { outcome = UnifiedDiff.make(old: old, new: new, oldName: name, newName: name) }
            let cpu = threadSeconds() - cpuBefore
            print("UnifiedDiff: \(label): \(cpu) s CPU, \(elapsed) (\(old.count) → \(new.count) bytes)")
            #expect(cpu < 10, "\(label): \(cpu) s")
            if fits {
                let text = try #require(textOf(outcome), "\(label)")
                #expect(String(decoding: text, as: UTF8.self).hasSuffix("@@ -2097150,7 +2097150,7 @@\n b\n a\n b\n-a\n+c\n b\n a\n b\n"))
            } else {
                guard case .tooLarge = outcome else {
                    Issue.record("\(label): \(outcome)")
                    continue
                }
            }
        }
    }

    // MARK: printable

    @Test func printableEscapesWhatDrivesATerminal() {
        func shown(_ bytes: [UInt8]) -> String { String(decoding: UnifiedDiff.printable(bytes), as: UTF8.self) }
        func shown(_ text: String) -> String { shown(Array(text.utf8)) }
        #expect(shown("+a\u{1B}[2J\r\n") == #"+a\x1b[2J\x0d"# + "\n")
        #expect(shown("+\ttab\u{7F}\u{00}\n") == "+\ttab" + #"\x7f\x00"# + "\n")
        #expect(shown([0x2B, 0xFF, 0xC3, 0x28, 0x0A]) == #"+\xff\xc3("# + "\n")  // not UTF-8
        #expect(shown([0x2B, 0xED, 0xA0, 0x80, 0x0A]) == #"+\xed\xa0\x80"# + "\n")  // a surrogate
        #expect(shown("+\u{9B}31m \u{202E}evil \u{200B}\n") == #"+\u{9b}31m \u{202e}evil \u{200b}"# + "\n")
        #expect(shown("+café 日本 🙂\n") == "+café 日本 🙂\n")
        // Backslashes before x, u or an escape are doubled; others are left alone.
        #expect(shown(#"+"\x1b" "\u{41}" "\n" "\\" \"# + "\n") == #"+"\\x1b" "\\u{41}" "\n" "\\" \"# + "\n")
        #expect(shown("+\\\u{1B}\n") == #"+\\\x1b"# + "\n")
        #expect(shown(#"+\\x"# + "\n") == #"+\\\\x"# + "\n")
        // A whole diff: headers unchanged.
        let diff = textOf(UnifiedDiff.make(old: Array("a\n".utf8), new: Array("\u{1B}]0;pwned\u{07}\n".utf8), oldName: Array("n\u{1B}".utf8), newName: Array("n\u{1B}".utf8)))!
        #expect(shown(diff) == #"diff --git "a/n\033" "b/n\033""# + "\n" + #"--- "a/n\033""# + "\n" + #"+++ "b/n\033""# + "\n@@ -1 +1 @@\n-a\n" + #"+\x1b]0;pwned\x07"# + "\n")
    }

    /// Random bytes: the shown text is UTF-8 with no control byte but \t and
    /// \n, and reading it back by the documented rule gives the bytes.
    @Test func printableIsUnambiguous() throws {
        var random = SplitMix(seed: 11)
        let pieces: [[UInt8]] = [[0x5C], [0x5C], Array("x".utf8), Array("u".utf8), Array("{41}".utf8), [0x1B], [0x0D], [0x0A], [0x09],
                                 [0xFF], [0xC3], [0xC3, 0xA9], [0xC2, 0x9B], [0xE2, 0x80, 0xAE], Array("ab".utf8), [0x7F], [0x00]]
        for _ in 0..<2000 {
            let bytes = Array((0..<random.below(12)).map { _ in pieces[random.below(pieces.count)] }.joined())
            let shown = UnifiedDiff.printable(bytes)
            #expect(shown.allSatisfy { $0 >= 0x20 && $0 != 0x7F || $0 == 0x0A || $0 == 0x09 })
            #expect(String(validating: shown, as: UTF8.self) != nil)
            #expect(Self.readBack(shown) == bytes, "\(bytes) shown as \(String(decoding: shown, as: UTF8.self))")
        }
    }

    /// The reading of `printable`'s output its documentation gives.
    static func readBack(_ shown: [UInt8]) -> [UInt8]? {
        var out: [UInt8] = []
        var index = 0
        while index < shown.count {
            guard shown[index] == 0x5C else {
                out.append(shown[index])
                index += 1
                continue
            }
            var end = index
            while end < shown.count && shown[end] == 0x5C { end += 1 }
            let run = end - index
            let next = end < shown.count ? shown[end] : 0
            guard next == UInt8(ascii: "x") || next == UInt8(ascii: "u") else {
                out += [UInt8](repeating: 0x5C, count: run)
                index = end
                continue
            }
            out += [UInt8](repeating: 0x5C, count: run / 2)
            index = end
            guard run % 2 == 1 else { continue }
            if next == UInt8(ascii: "x") {
                guard end + 3 <= shown.count, let byte = UInt8(String(decoding: shown[end + 1..<end + 3], as: UTF8.self), radix: 16) else { return nil }
                out.append(byte)
                index = end + 3
            } else {
                guard let close = shown[end...].firstIndex(of: UInt8(ascii: "}")), shown[end + 1] == UInt8(ascii: "{"),
                      let value = UInt32(String(decoding: shown[end + 2..<close], as: UTF8.self), radix: 16),
                      let scalar = Unicode.Scalar(value) else { return nil }
                out += Array(String(scalar).utf8)
                index = close + 1
            }
        }
        return out
    }

    // MARK: Support

    /// Names git writes quoted; no spaces.
    static let quotedNames: [[UInt8]] = [
        "na\nme", "ta\tb", "esc\u{1B}[31m", "quo\"te", "back\\slash", "caf\u{E9}", "del\u{7F}", "bell\u{07}\u{08}\u{0B}\u{0C}\r",
        "\"", "\\",
    ].map { Array($0.utf8) } + [[0x66, 0xFF, 0xFE], [0x01, 0x1F, 0x80]]
    /// Names with spaces, which this quotes and git does not.
    static let spacedNames: [[UInt8]] = ["end ", " start", "in side", " ", "a b\tc"].map { Array($0.utf8) }

    /// One file's two versions and names.
    struct Case {
        var old: [UInt8]?
        var new: [UInt8]?
        var oldName: [UInt8]
        var newName: [UInt8]

        init(old: [UInt8]?, new: [UInt8]?, oldName: [UInt8], newName: [UInt8]) {
            self.old = old
            self.new = new
            self.oldName = old == nil ? newName : oldName
            self.newName = new == nil ? oldName : newName
        }

        init(_ name: String, _ old: String?, _ new: String?, newName: String? = nil) {
            self.init(old: old.map { Array($0.utf8) }, new: new.map { Array($0.utf8) }, oldName: Array(name.utf8), newName: Array((newName ?? name).utf8))
        }

        init(_ name: [UInt8], _ old: String?, _ new: String?) {
            self.init(old: old.map { Array($0.utf8) }, new: new.map { Array($0.utf8) }, oldName: name, newName: name)
        }

        init(_ old: String?, _ new: String?, oldName: [UInt8], newName: [UInt8]) {
            self.init(old: old.map { Array($0.utf8) }, new: new.map { Array($0.utf8) }, oldName: oldName, newName: newName)
        }

        func outcome(context: Int = 3) -> UnifiedDiff.Outcome {
            UnifiedDiff.make(old: old, new: new, oldName: oldName, newName: newName, context: context)
        }

        func text(context: Int = 3) throws -> [UInt8] {
            try #require(textOf(outcome(context: context)), "\(self)")
        }
    }

    /// Writes every case's old file, applies all the diffs as one patch with
    /// `git apply` in a repository and with `patch -p1`, and checks that the
    /// folder then holds exactly the new files, hunks applied where their
    /// headers say; and applies each diff with the strict applier.
    func check(_ cases: [Case], context: Int = 3) throws {
        var patch: [UInt8] = []
        for item in cases {
            switch item.outcome(context: context) {
            case .text(let text):
                patch += text
                #expect(try strictlyApply(text, to: item.old ?? []) == item.new ?? [], "\(String(decoding: text, as: UTF8.self))")
            case .identical:
                #expect(item.old == item.new && item.oldName == item.newName)
            case let other:
                Issue.record("\(item): \(other)")
            }
        }
        var expected: [[UInt8]: [UInt8]] = [:]
        for item in cases { if let new = item.new { expected[item.newName] = new } }

        let aside = try Scratch()
        try aside.write(patch, Array("patch".utf8))
        for tool in ["git", "patch"] {
            let tree = try Scratch()
            if tool == "git" { try tree.git(["init", "-q"]) }
            for item in cases { if let old = item.old { try tree.write(old, item.oldName) } }
            let output: (output: [UInt8], errors: String)
            if tool == "git" {
                // -v: says "with offset" if a hunk had to be moved; zero context needs --unidiff-zero.
                output = try tree.git(["apply", "-v"] + (context == 0 ? ["--unidiff-zero"] : []) + [aside.path + "/patch"])
            } else {
                output = try tree.run(["/usr/bin/patch", "-p1", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "-i", aside.path + "/patch"])
            }
            let said = String(decoding: output.output, as: UTF8.self) + output.errors
            // With no context git applies a removal at the line its new side
            // names, and says "offset" to git's own `diff -U0` too.
            if context > 0 || tool == "patch" {
                #expect(!said.contains("offset") && !said.contains("fuzz"), "\(tool): \(said)")
            }
            let firstComponents = Set(expected.keys.map { Array($0.prefix(while: { $0 != 0x2F })) })
            #expect(try tree.names() == firstComponents, "\(tool): \(said)")
            for (name, bytes) in expected {
                #expect(tree.read(name) == bytes, "\(tool): \(String(decoding: name, as: UTF8.self)): \(said)")
            }
        }
    }

    /// Applies one file's diff, taking every hunk at exactly the line its
    /// header names and checking every count, context and removed line.
    func strictlyApply(_ diff: [UInt8], to old: [UInt8]) throws -> [UInt8] {
        struct Malformed: Error, CustomStringConvertible { let description: String }
        let patchLines = diff.split(separator: 0x0A, omittingEmptySubsequences: false).dropLast().map(Array.init)
        #expect(diff.last == 0x0A)
        let oldLines = splitLines(old)
        var out: [[UInt8]] = []
        var position = 0
        var index = patchLines.firstIndex { $0.starts(with: Array("@@ ".utf8)) } ?? patchLines.count
        while index < patchLines.count {
            let header = String(decoding: patchLines[index], as: UTF8.self)
            let fields = header.split(separator: " ")
            guard fields.count == 4, fields[0] == "@@", fields[3] == "@@", fields[1].first == "-", fields[2].first == "+" else {
                throw Malformed(description: "hunk header \(header)")
            }
            func range(_ field: Substring) throws -> (start: Int, count: Int) {
                let parts = field.dropFirst().split(separator: ",").map { Int($0) }
                guard let start = parts.first ?? nil, parts.count <= 2, let count = parts.count == 2 ? parts[1] : 1 else { throw Malformed(description: header) }
                return (count == 0 ? start : start - 1, count)
            }
            let (oldStart, oldCount) = try range(fields[1])
            let (newStart, newCount) = try range(fields[2])
            guard oldStart >= position, oldStart + oldCount <= oldLines.count else { throw Malformed(description: "\(header) at line \(position)") }
            out += oldLines[position..<oldStart]
            position = oldStart
            guard out.count == newStart else { throw Malformed(description: "\(header): new line \(out.count)") }
            index += 1
            var seenOld = 0, seenNew = 0
            while seenOld < oldCount || seenNew < newCount {
                guard index < patchLines.count, let mark = patchLines[index].first else { throw Malformed(description: "short hunk \(header)") }
                var line = Array(patchLines[index].dropFirst()) + [0x0A]
                index += 1
                if index < patchLines.count && patchLines[index] == Array("\\ No newline at end of file".utf8) {
                    line.removeLast()
                    index += 1
                }
                switch mark {
                case 0x20, 0x2D:
                    guard position < oldLines.count, oldLines[position] == line else { throw Malformed(description: "\(header): line \(position + 1) differs") }
                    position += 1
                    seenOld += 1
                    if mark == 0x20 {
                        out.append(line)
                        seenNew += 1
                    }
                case 0x2B:
                    out.append(line)
                    seenNew += 1
                default: throw Malformed(description: "line mark \(mark) in \(header)")
                }
            }
            guard seenOld == oldCount && seenNew == newCount else { throw Malformed(description: "counts of \(header)") }
        }
        out += oldLines[position...]
        return Array(out.joined())
    }

    /// Lines removed and added in a diff's hunks.
    func changedLines(_ diff: [UInt8]) -> (removed: Int, added: Int) {
        var removed = 0, added = 0, inHunk = false
        for line in diff.split(separator: 0x0A, omittingEmptySubsequences: false) {
            if line.starts(with: Array("@@ ".utf8)) { inHunk = true } else if inHunk && line.first == 0x2D { removed += 1 } else if inHunk && line.first == 0x2B { added += 1 }
        }
        return (removed, added)
    }

    func longestCommonSubsequence(_ a: [[UInt8]], _ b: [[UInt8]]) -> Int {
        var row = [Int](repeating: 0, count: b.count + 1)
        for x in a {
            var diagonal = 0
            for (j, y) in b.enumerated() {
                let above = row[j + 1]
                row[j + 1] = x == y ? diagonal + 1 : max(above, row[j])
                diagonal = above
            }
        }
        return row[b.count]
    }
}

// MARK: - Helpers

/// Lines with their "\n" (the last may have none).
func splitLines(_ bytes: [UInt8]) -> [[UInt8]] {
    var result: [[UInt8]] = []
    var start = 0
    for (index, byte) in bytes.enumerated() where byte == 0x0A {
        result.append(Array(bytes[start...index]))
        start = index + 1
    }
    if start < bytes.count { result.append(Array(bytes[start...])) }
    return result
}

/// The CPU time the calling thread has used.
func threadSeconds() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// "1\n2\n…" for a range, with some lines changed.
func numbered(_ range: ClosedRange<Int>, _ changes: [Int: String] = [:]) -> String { range.map { "\(changes[$0] ?? String($0))\n" }.joined() }

/// `pattern` again and again, `count` bytes.
func repeating(_ pattern: [UInt8], toFill count: Int) -> [UInt8] {
    [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
        for index in 0..<count { buffer[index] = pattern[index % pattern.count] }
        initialized = count
    }
}

func textOf(_ outcome: UnifiedDiff.Outcome) -> [UInt8]? {
    if case .text(let text) = outcome { return text }
    return nil
}

func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
    guard needle.count <= haystack.count else { return nil }
    return (0...haystack.count - needle.count).first { haystack[$0..<$0 + needle.count].elementsEqual(needle) }
}

func remove(_ line: [UInt8], from text: [UInt8]) -> [UInt8] {
    var text = text
    while let at = find(line, in: text) { text.removeSubrange(at..<at + line.count) }
    return text
}

/// A deterministic generator, so that a failing case can be found again.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ bound: Int) -> Int { bound <= 0 ? 0 : Int(next() % UInt64(bound)) }
}

/// A scratch folder (mkdtemp) whose files have names of any bytes, removed at deinit.
final class Scratch {
    struct Failed: Error, CustomStringConvertible { let description: String }
    let path: String
    private let removing: Bool

    init(removing: Bool = true) throws {
        self.removing = removing
        var template = Array((NSTemporaryDirectory() + "unified-diff-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw Failed(description: "mkdtemp: errno \(errno)") }
        path = String(cString: made)
    }

    deinit { if removing { _ = try? Self.remove(path) } }

    private func withPath<R>(_ name: [UInt8], _ body: (UnsafePointer<CChar>) -> R) -> R {
        let bytes = Array(path.utf8) + [0x2F] + name + [0]
        return bytes.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) } }
    }

    /// Writes a file, making its folder if the name has one.
    func write(_ bytes: [UInt8], _ name: [UInt8]) throws {
        if let slash = name.firstIndex(of: 0x2F) { _ = withPath(Array(name[..<slash])) { mkdir($0, 0o755) } }
        let fd = withPath(name) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) }
        guard fd >= 0 else { throw Failed(description: "open \(name): errno \(errno)") }
        defer { close(fd) }
        var done = 0
        while done < bytes.count {
            let count = bytes[done...].withUnsafeBytes { Foundation.write(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { throw Failed(description: "write: errno \(errno)") }
            done += count
        }
    }

    func remove(_ name: [UInt8]) throws {
        guard withPath(name, { unlink($0) }) == 0 else { throw Failed(description: "unlink \(name): errno \(errno)") }
    }

    /// The file's bytes, or nil if it cannot be read.
    func read(_ name: [UInt8]) -> [UInt8]? {
        let fd = withPath(name) { open($0, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            guard count >= 0 else { return nil }
            if count == 0 { return out }
            out += buffer[..<count]
        }
    }

    /// The names in the folder, but . .. and .git.
    func names() throws -> Set<[UInt8]> {
        guard let directory = opendir(path) else { throw Failed(description: "opendir: errno \(errno)") }
        defer { closedir(directory) }
        var result: Set<[UInt8]> = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix(while: { $0 != 0 })) }
            if ![".", "..", ".git"].map({ Array($0.utf8) }).contains(name) { result.insert(name) }
        }
        return result
    }

    /// `git` with no user or system configuration, in the folder.
    @discardableResult
    func git(_ arguments: [String]) throws -> (output: [UInt8], errors: String) {
        try run(["/usr/bin/git", "-c", "core.quotePath=true"] + arguments,
                environment: ["GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": path, "PATH": "/usr/bin:/bin", "LC_ALL": "C"])
    }

    /// A command in the folder: its stdout, and its stderr as text (both
    /// written to files, not pipes, so a long output cannot block it).
    /// Fails the test if the command fails.
    @discardableResult
    func run(_ arguments: [String], environment: [String: String] = ["PATH": "/usr/bin:/bin", "LC_ALL": "C"]) throws -> (output: [UInt8], errors: String) {
        let files = try Scratch(removing: false)
        defer { _ = try? Self.remove(files.path) }
        let output = try files.handle(Array("out".utf8)), errors = try files.handle(Array("err".utf8))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        process.currentDirectoryURL = URL(fileURLWithPath: path)
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        process.waitUntilExit()
        try output.close()
        try errors.close()
        let said = String(decoding: files.read(Array("err".utf8)) ?? [], as: UTF8.self)
        #expect(process.terminationReason == .exit && process.terminationStatus == 0, "\(arguments.joined(separator: " ")): \(said)")
        return (files.read(Array("out".utf8)) ?? [], said)
    }

    /// A new file of the folder, open for writing.
    private func handle(_ name: [UInt8]) throws -> FileHandle {
        let fd = withPath(name) { open($0, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644) }
        guard fd >= 0 else { throw Failed(description: "open: errno \(errno)") }
        return FileHandle(fileDescriptor: fd, closeOnDealloc: true)
    }

    private static func remove(_ path: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/rm")
        process.arguments = ["-rf", "--", path]
        try process.run()
        process.waitUntilExit()
    }
}
