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
}
