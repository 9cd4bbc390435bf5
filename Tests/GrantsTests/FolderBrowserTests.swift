import Foundation
import Testing
import SystemPackage
@testable import AppSandbox
@testable import Grants
import Sandbox

/// The terminal folder browser on its own: the keys it reads from what a
/// terminal sends, and the frames it draws.
@Suite struct FolderBrowserTests {
    typealias Key = FolderBrowser.Key

    static func keys(_ reads: [[UInt8]], interrupt: UInt8 = 0x03) -> [Key] {
        var keys = FolderBrowser.Keys(interrupt: interrupt)
        return reads.flatMap { keys.feed($0) }
    }

    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// The person's keys still arrive: arrows in both cursor-key modes (with a
    /// modifier too), Enter, Space, letters, Esc alone, Ctrl-C and Ctrl-D.
    @Test func keysArrive() {
        #expect(Self.keys([Self.bytes("\u{1B}[A"), Self.bytes("\u{1B}OB"), Self.bytes("\u{1B}[1;5C"), Self.bytes("\u{1B}[D")])
            == [.up, .down, .right, .left])
        #expect(Self.keys([Self.bytes("jk c\r")]) == [.character(0x6A), .character(0x6B), .space, .character(0x63), .enter])
        #expect(Self.keys([[0x03], [0x04]]) == [.interrupt, .interrupt])
        var keys = FolderBrowser.Keys()
        #expect(keys.feed([0x1B]).isEmpty && keys.waiting)
        #expect(keys.flush() == [.escape])
        // Alt and a key, and other escape sequences: dropped, what follows still read.
        #expect(Self.keys([Self.bytes("\u{1B}j"), Self.bytes("\u{1B}(B"), Self.bytes("\u{1B}[3~"), Self.bytes("y")]) == [.character(0x79)])
    }

    /// A terminal's replies, which can come long after the command asked for
    /// them (an OSC 52 clipboard read the terminal asks the person about), are
    /// never keys: every string sequence (OSC, DCS, APC, PM, SOS, ended by ST
    /// or BEL, or aborted), mouse report (X10, SGR, urxvt) and report, in
    /// 7-bit and 8-bit (raw or UTF-8) forms, whole or in parts across reads.
    /// The attack's replies: `c` `y` (grant all of the folder listed,
    /// read-write) in an OSC 52 answer, a space in a kitty APC answer or an X10 click.
    @Test func aTerminalsRepliesAreNeverKeys() {
        let replies: [[UInt8]] = [
            Self.bytes("\u{1B}]52;c;cyE=\u{1B}\\"),  // OSC 52, ended by ST
            Self.bytes("\u{1B}]52;c;cyE=\u{07}"),  // ended by BEL
            Self.bytes("\u{1B}_Gi=1;ENOENT:No such file or directory\u{1B}\\"),  // kitty graphics (APC)
            Self.bytes("\u{1B}P1$r0;1 q\u{1B}\\"),  // DECRQSS (DCS)
            Self.bytes("\u{1B}^ y y \u{1B}\\"), Self.bytes("\u{1B}X y c \u{1B}\\"),  // PM, SOS
            Self.bytes("\u{1B}[M") + [32, 52, 40],  // X10 mouse: button 1 (a space)
            Self.bytes("\u{1B}[M") + [0x20, 0xE0, 0x90],  // far right: coordinates past 0x7F
            Self.bytes("\u{1B}[<0;20;8M\u{1B}[<0;20;8m"),  // SGR mouse
            Self.bytes("\u{1B}[32;20;8M"),  // urxvt mouse
            Self.bytes("\u{1B}[12;40R\u{1B}[?62;c\u{1B}[?1;2$y\u{1B}[?0u"),  // cursor position, attributes, mode, kitty flags
            Self.bytes("\u{1B}[200~ cy \r\u{1B}[201~"),  // a bracketed paste
            [0x9D] + Self.bytes("52;c;cyE=") + [0x9C],  // 8-bit OSC and ST
            [0xC2, 0x9D] + Self.bytes("52;c;cyE=") + [0xC2, 0x9C],  // the same in UTF-8
            [0x9F] + Self.bytes("Gi=1; y c") + [0x1B, 0x5C], [0x9B] + Self.bytes("M") + [32, 52, 40],
            Self.bytes("\u{1B}]0;title \u{201C}y c\u{201D} \u{1B}\\"),  // UTF-8 inside: its C1-looking bytes end nothing
        ]
        for reply in replies {
            #expect(Self.keys([reply]).isEmpty, "\(reply)")
            // Split anywhere into two reads (slowly, as over a network): still no key.
            for cut in 1..<reply.count {
                #expect(Self.keys([Array(reply[..<cut]), Array(reply[cut...])]).filter { $0 != .escape }.isEmpty, "\(reply) cut at \(cut)")
            }
        }
        // Keys in the same read as a reply are dropped too: the read is the terminal's.
        #expect(Self.keys([Self.bytes("c\u{1B}]52;c;eQ==\u{1B}\\y")]).isEmpty)
        #expect(Self.keys([Self.bytes(" \u{1B}[M") + [32, 52, 40]]).isEmpty)
        // A reply's rest after a pause (the flush) is no key either, and keys come back after it.
        var keys = FolderBrowser.Keys()
        #expect(keys.feed(Self.bytes("\u{1B}]52;c;")).isEmpty)
        #expect(keys.flush().isEmpty)
        #expect(keys.feed(Self.bytes("cyE=\u{1B}\\")).isEmpty)
        #expect(keys.feed(Self.bytes("j")) == [.character(0x6A)])
        // CAN and SUB abort a string; the interrupt key always cancels, even inside one.
        #expect(Self.keys([Self.bytes("\u{1B}]52;c;cy\u{18}"), Self.bytes("j")]) == [.character(0x6A)])
        #expect(Self.keys([Self.bytes("\u{1B}]52;c;cy"), [0x03]]) == [.interrupt])
        // A lone Esc inside a string left open is the person's Esc: it cancels.
        keys = FolderBrowser.Keys()
        #expect(keys.feed(Self.bytes("\u{1B}P")).isEmpty && keys.feed([0x1B]).isEmpty && keys.waiting)
        #expect(keys.flush() == [.escape])
    }

    func scratch() throws -> String {
        let path = NSTemporaryDirectory() + "sandboxed-run-browser-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    func browser(_ path: String, words: String? = nil, unicode: Bool = true) throws -> FolderBrowser {
        var browser = FolderBrowser(title: ["com.example.app asks for a folder, to read and write (read-write)."], words: words,
                                    access: .readWrite, startingAt: try OwnedDescriptor.openFolder(FilePath(path), follow: false))
        browser.unicode = unicode
        return browser
    }

    /// Columns as a terminal counts them (per scalar, wide ones two).
    static func columns(_ line: String) -> Int {
        var text = line
        while let escape = text.range(of: "\u{1B}\\[[0-9;]*m", options: .regularExpression) { text.removeSubrange(escape) }
        return text.unicodeScalars.reduce(0) { $0 + ($1.isASCII ? 1 : 2) }
    }

    /// A grapheme of forty Hangul leading jamo is eighty columns on a
    /// terminal: the footer, which shows the chosen path whole, wraps it, and no line is wider than the frame.
    @Test func widthsAreCountedPerScalar() throws {
        let path = try scratch()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let name = "Vault" + String(repeating: "\u{1100}", count: 40) + "-and-what-is-hidden-at-the-end"
        try FileManager.default.createDirectory(atPath: path + "/" + name, withIntermediateDirectories: true)
        var browser = try browser(path)
        let lines = browser.frame(width: 100, height: 30)
        for line in lines { #expect(Self.columns(line) <= 100, "\(line)") }
        #expect(lines.joined().contains("-and-what-is-hidden-at-the-end"), "\(lines)")
    }

    /// The app's words take one line of their own, cut to fit: quotes in
    /// them escaped, every character outside ASCII escaped, runs of spaces
    /// as one. Padded to wrap onto a line of its own, a fake label of the launcher's stays on the app's line.
    @Test func theAppsWordsAreOneLineOfItsOwn() throws {
        let path = try scratch()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let words = "Pick a folder\u{201D}\"" + String(repeating: " ", count: 60) + "Recommended by sandboxed-run: the highlighted folder is read-only"
        var browser = try browser(path, words: FolderBrowser.appWords(words))
        let lines = browser.frame(width: 80, height: 30)
        let line = try #require(lines.first { $0.hasPrefix("Its words: ") }, "\(lines)")
        #expect(line.hasPrefix("Its words: \u{201C}Pick a folder\\u{201d}\\\" Recommended by sandboxed-run"), "\(line)")
        #expect(line.hasSuffix("…") && Self.columns(line) <= 80, "\(line)")
        #expect(lines.filter { $0.contains("Recommended") }.count == 1, "\(lines)")
        #expect(lines.filter { $0.contains("\u{201D}") }.isEmpty, "the app closed the launcher's quote: \(lines)")
    }

    /// On a terminal that may not be in UTF-8 (the locale says otherwise)
    /// every character outside ASCII is escaped: no byte 0x80–0x9F (a C1
    /// control in ISO 8859-1) comes from a folder's name, nor from the launcher's own text.
    @Test func withoutUTF8NothingOutsideASCIIIsDrawn() throws {
        let path = try scratch()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try FileManager.default.createDirectory(atPath: path + "/Pick\u{DB}?1000h", withIntermediateDirectories: true)
        var browser = try browser(path, words: FolderBrowser.appWords("Vault\u{DB}?1000h"), unicode: false)
        let lines = browser.frame(width: 200, height: 30)
        #expect(lines.allSatisfy { $0.utf8.allSatisfy { $0 < 0x80 } }, "\(lines)")
        #expect(lines.contains { $0.contains("Pick\\u{db}?1000h/") }, "\(lines)")
        #expect(lines.contains("Its words: \"Vault\\u{db}?1000h\""), "\(lines)")
        // In UTF-8 the app's words are still ASCII.
        browser.unicode = true
        #expect(browser.frame(width: 200, height: 30).contains("Its words: \u{201C}Vault\\u{db}?1000h\u{201D}"))
    }

    /// A folder of many thousand folders (an app can make one where the
    /// browser starts): the first `listLimit` are read, the frame says the
    /// list was cut and how to narrow it, keys do not read it again, and
    /// typing part of a name finds a folder past the cut.
    @Test func aHugeFolderIsListedInBoundedTime() throws {
        let path = try scratch()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let count = 3 * FolderBrowser.listLimit
        for index in 0..<count { #expect(mkdir(path + "/" + String(format: "%06d", index) + String(repeating: "x", count: 100), 0o755) == 0) }
        var start = FolderBrowser.clock()
        var browser = try browser(path)
        var lines = browser.frame(width: 160, height: 30)
        #expect(FolderBrowser.clock() - start < 2, "first frame")
        #expect(lines.contains { $0.contains("Not all folders here are listed") && $0.contains("/ and part of a name narrows") }, "\(lines)")
        // Keys move over what was read: no reading again (a folder unchanged).
        start = FolderBrowser.clock()
        for _ in 0..<50 {
            _ = browser.handle(.down)
            lines = browser.frame(width: 160, height: 30)
        }
        #expect(FolderBrowser.clock() - start < 2, "fifty keys")
        // Narrowed to a name the cut left out.
        let wanted = String(format: "%06d", count - 1)
        _ = browser.handle(.character(UInt8(ascii: "/")))
        for byte in wanted.utf8 { _ = browser.handle(.character(byte)) }
        _ = browser.handle(.enter)
        lines = browser.frame(width: 160, height: 30)
        #expect(lines.contains { $0.hasPrefix("\u{1B}[7m> " + wanted) }, "\(lines)")
        #expect(!lines.contains { $0.contains("Not all folders here are listed") }, "\(lines)")
    }

    /// Links the app made that each cost a long lookup (a chain of links,
    /// each 680 folders down and back up: about 2 ms a name here) are
    /// listed within the time limit too: the clock was read only every
    /// 256 names, so 256 such links held the launcher's loop 0.4 s or more
    /// past it (attack review of #31).
    @Test func costlyLinksAreListedInBoundedTime() throws {
        let path = try scratch()
        defer { try? FileManager.default.removeItem(atPath: path) }
        var folder = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        for _ in 0..<680 {
            #expect(mkdirat(folder, "d", 0o755) == 0)
            let next = openat(folder, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            close(folder)
            folder = next
        }
        close(folder)
        let down = Array(repeating: "d", count: 680).joined(separator: "/") + "/" + Array(repeating: "..", count: 680).joined(separator: "/")
        #expect(symlink(down, path + "/L0") == 0)
        let chain = Array(repeating: "L0", count: 38).joined(separator: "/")
        for index in 0..<600 { #expect(symlink(chain, path + "/" + String(format: "a%03d", index)) == 0) }
        let start = FolderBrowser.clock()
        var browser = try browser(path)
        _ = browser.frame(width: 160, height: 30)
        let took = FolderBrowser.clock() - start
        #expect(took < FolderBrowser.scanTime + 0.15, "the first frame took \(took) s")
    }

    /// The list is read again when the folder changes, not for every key.
    @Test func aChangedFolderIsReadAgain() throws {
        let path = try scratch()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try FileManager.default.createDirectory(atPath: path + "/b", withIntermediateDirectories: true)
        var browser = try browser(path)
        #expect(!browser.frame(width: 80, height: 30).contains { $0.contains("a/") })
        try FileManager.default.createDirectory(atPath: path + "/a", withIntermediateDirectories: true)
        #expect(browser.frame(width: 80, height: 30).contains { $0.contains("> a/") })
    }
}
