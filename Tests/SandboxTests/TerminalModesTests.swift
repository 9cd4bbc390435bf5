import Testing
@testable import Sandbox

/// What the relay follows of the command's output to give it back its
/// terminal modes after a question (`TerminalModes`).
@Suite struct TerminalModesTests {
    func followed(_ chunks: [String]) -> TerminalModes {
        var modes = TerminalModes()
        for chunk in chunks { modes.follow(Array(chunk.utf8)) }
        return modes
    }

    @Test func nothingFollowedRestoresOnlyWhatTheQuestionChanged() {
        #expect(TerminalModes().restore == "\u{1B}[<u\u{1B}[>4m")
    }

    @Test func theModesACommandSetAreGivenBackAsItLeftThem() {
        let modes = followed([
            "\u{1B}[?1h\u{1B}=\u{1B}[?1000;1006h\u{1B}[?2004h\u{1B}[?25l\u{1B}[>4;2m\u{1B}[20h",
            "\u{1B}[?1000l",  // turned off again: given back off
        ])
        #expect(modes.restore == "\u{1B}[<u\u{1B}[>4;2m\u{1B}[?1;1006;2004h\u{1B}[?25;1000l\u{1B}[20h\u{1B}=")
    }

    /// The relay reads the pty in pieces: a sequence cut anywhere is followed whole.
    @Test func aSequenceSplitAcrossReadsIsFollowed() {
        let whole = "text \u{1B}[?1002h more \u{1B}[>4;1m end \u{9B}?2004h"  // U+009B: CSI as UTF-8 terminals take it
        let bytes = Array(whole.utf8)
        let expected = followed([whole]).restore
        #expect(expected.contains("\u{1B}[>4;1m") && expected.contains("?1002;2004h"), "\(expected.debugDescription)")
        for cut in 1..<bytes.count {
            var modes = TerminalModes()
            modes.follow(Array(bytes[..<cut]))
            modes.follow(Array(bytes[cut...]))
            #expect(modes.restore == expected, "cut at \(cut)")
        }
    }

    /// What a terminal would not take as a mode change is not followed:
    /// inside strings, after CAN, with another marker or an intermediate.
    @Test func onlyRealSequencesCount() {
        let ignored = followed(["\u{1B}]0;[?1000h\u{07}", "\u{1B}P[?1003h\u{1B}\\", "[?1002h"])  // an OSC's and a DCS's text, plain text
        #expect(ignored.privateSet.isEmpty, "\(ignored.restore.debugDescription)")
        #expect(followed(["\u{1B}P\u{1B}[?1003h"]).privateSet[1003] == true, "ESC ends a string and starts a sequence, as in terminals")
        let cancelled = followed(["\u{1B}[?10\u{18}00h", "\u{1B}[>?1h", "\u{1B}[?1 h", "\u{1B}[?1:2h", "\u{1B}[=4;2m"])
        #expect(cancelled.privateSet.isEmpty && cancelled.modifyOtherKeys == nil, "\(cancelled.restore.debugDescription)")
    }

    @Test func resetsForgetWhatWasSet() {
        let hard = followed(["\u{1B}[?1000h\u{1B}[>4;2m\u{1B}=", "\u{1B}c"])
        #expect(hard.restore == TerminalModes().restore)
        let soft = followed(["\u{1B}[?1h\u{1B}[?25l\u{1B}[?2004h\u{1B}=", "\u{1B}[!p"])
        #expect(soft.restore == "\u{1B}[<u\u{1B}[>4m\u{1B}[?2004h", "DECSTR resets cursor keys, the cursor and the keypad, not paste")
        #expect(followed(["\u{1B}[>4;2m\u{1B}[>4n"]).modifyOtherKeys == .disabled)
        #expect(followed(["\u{1B}[>4;2m\u{1B}[>m"]).modifyOtherKeys == .initial)
    }

    /// A hostile command's output bounds what is kept: huge numbers and
    /// endless parameter lists change nothing beyond the fixed modes, and
    /// `restore` carries only digits the command chose.
    @Test func hostileOutputStaysInBounds() {
        let huge = followed(["\u{1B}[>4;" + String(repeating: "9", count: 10_000) + "m"])
        #expect(huge.modifyOtherKeys == .level(99_999))
        let long = followed(["\u{1B}[?" + Array(repeating: "1000", count: 10_000).joined(separator: ";") + "h"])
        #expect(long.privateSet.isEmpty, "a parameter list beyond the limit is not one of ours")
        let restore = followed(["\u{1B}[?1000h\u{1B}[>4;\u{1B}7m"]).restore
        #expect(restore.utf8.allSatisfy { $0 == 0x1B || (0x20...0x7E).contains($0) }, "\(restore.debugDescription)")
        #expect(TerminalModes.plain.contains("\u{1B}[>0u") && TerminalModes().restore.hasPrefix("\u{1B}[<u"), "the kitty push is popped")
    }
}
