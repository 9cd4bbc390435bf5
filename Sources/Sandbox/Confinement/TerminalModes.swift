/// The modes of the person's terminal that the command's output set and
/// that change what a key, a click or a paste sends: followed in the bytes
/// the relay writes to the terminal, so that a question to the person
/// (`LiveGrantTerminalSession`) can turn them all off and then give the
/// command back the ones it had.
///
/// Followed rather than asked: a query (DECRQM, XTQMODKEYS) is answered on
/// the person's input, mixed with their keys, and a terminal that does not
/// answer would leave the launcher waiting. Not saved and restored by the
/// terminal (XTSAVE/XTRESTORE, `CSI ? Pm s`/`r`): many terminals lack them,
/// and there the command would lose its modes. The kitty keyboard flags
/// need neither: the question pushes flags 0 on the terminal's own stack and
/// pops them after (`CSI > 0 u`, `CSI < u`).
///
/// The question's safety never depends on this: it turns every mode here
/// off whatever was followed (`plain`). Following only decides what is
/// turned back on (`restore`), and a wrong guess can only turn on a mode the
/// command could have turned on itself.
struct TerminalModes {
    /// DEC private modes followed (`CSI ? Pm h`/`l`): cursor keys (1),
    /// wrapping (7), the cursor shown (25), keypad (66), mouse reports (9,
    /// 1000–1003) and their encodings (1005, 1006, 1015, 1016), focus
    /// reports (1004), bracketed paste (2004). Not the alternate screen: the
    /// question is shown on whichever screen is up, so that leaving it does
    /// not wipe the command's display.
    static let privateModes = [1, 7, 25, 66, 9, 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1015, 1016, 2004]
    /// ANSI modes followed (`CSI Pm h`/`l`): insert (4), and new-line mode
    /// (20), in which Enter sends CR LF.
    static let ansiModes = [4, 20]

    /// xterm's modifyOtherKeys (`CSI > 4 ; N m`): at level 2 Ctrl-C and
    /// Enter with a modifier send escape sequences.
    enum OtherKeys: Equatable {
        /// `CSI > 4 m`: the terminal's configured value.
        case initial
        case level(Int)
        /// `CSI > 4 n`.
        case disabled
    }

    /// What the command set; nil: never set (or reset since), so at the
    /// terminal's default, which the question's `plain` also gives.
    private(set) var privateSet: [Int: Bool] = [:]
    private(set) var ansiSet: [Int: Bool] = [:]
    private(set) var applicationKeypad: Bool?
    private(set) var modifyOtherKeys: OtherKeys?

    /// What a question writes before it asks: every mode above off (the
    /// wrapping and the cursor on), modifyOtherKeys 0, and kitty keyboard
    /// flags 0 pushed. Sequences a terminal does not know it ignores.
    static let plain = "\u{1B}[?1l\u{1B}>\u{1B}[?66l\u{1B}[?7h\u{1B}[?25h\u{1B}[4l\u{1B}[20l"
        + "\u{1B}[?2004l\u{1B}[?9l\u{1B}[?1000l\u{1B}[?1001l\u{1B}[?1002l\u{1B}[?1003l"
        + "\u{1B}[?1005l\u{1B}[?1006l\u{1B}[?1015l\u{1B}[?1016l\u{1B}[?1004l"
        + "\u{1B}[>4;0m\u{1B}[>0u"

    /// What gives the command its modes back after `plain`: the kitty flags
    /// popped, modifyOtherKeys as it was, and each mode it set as it set it.
    var restore: String {
        var out = "\u{1B}[<u"
        switch modifyOtherKeys {
        case nil, .initial: out += "\u{1B}[>4m"
        case .level(let level): out += "\u{1B}[>4;\(level)m"
        case .disabled: out += "\u{1B}[>4n"
        }
        func set(_ modes: [Int], _ values: [Int: Bool], prefix: String) -> String {
            let on = modes.filter { values[$0] == true }, off = modes.filter { values[$0] == false }
            return (on.isEmpty ? "" : "\u{1B}[" + prefix + on.map(String.init).joined(separator: ";") + "h")
                + (off.isEmpty ? "" : "\u{1B}[" + prefix + off.map(String.init).joined(separator: ";") + "l")
        }
        out += set(Self.privateModes, privateSet, prefix: "?") + set(Self.ansiModes, ansiSet, prefix: "")
        if applicationKeypad == true { out += "\u{1B}=" }
        return out
    }

    // MARK: The parser (the states of a VT500-style parser that matter here)

    private enum State { case ground, escape, escapeIntermediate, csi, csiIgnore, string, osc }
    private var state = State.ground
    /// The byte before was 0xC2: with 0x80–0x9F it is a C1 control in UTF-8 (U+0080–U+009F).
    private var afterC2 = false
    private var marker: UInt8 = 0
    private var intermediate: UInt8 = 0
    private var parameters: [Int] = []
    /// The parameter being read; -1: none yet (empty).
    private var current = -1
    /// Most parameters kept, and the largest value: a sequence can be as long as the command likes.
    private static let parameterLimit = 16
    private static let valueLimit = 99_999

    init() { parameters.reserveCapacity(Self.parameterLimit) }

    /// Follows bytes as they reach the terminal.
    mutating func follow(_ bytes: UnsafeRawBufferPointer) {
        for byte in bytes {
            if afterC2 {
                afterC2 = false
                if byte >= 0x80 && byte <= 0x9F {
                    step(0x1B)
                    step(byte - 0x40)
                    continue
                }
            }
            if byte == 0xC2 {
                afterC2 = true
                continue
            }
            step(byte)
        }
    }

    mutating func follow(_ bytes: [UInt8]) { bytes.withUnsafeBytes { follow($0) } }

    /// The terminal got CAN (the question's first byte): any sequence left open is over.
    mutating func cancelSequence() {
        state = .ground
        afterC2 = false
    }

    private mutating func step(_ byte: UInt8) {
        switch byte {
        case 0x18, 0x1A:  // CAN, SUB: end any sequence or string
            state = .ground
            return
        case 0x1B:  // ESC, also inside a string (ESC \ is ST)
            state = .escape
            intermediate = 0
            return
        default: break
        }
        switch state {
        case .ground: break
        case .escape:
            switch byte {
            case 0x20...0x2F: state = .escapeIntermediate
            case UInt8(ascii: "["):
                state = .csi
                marker = 0
                intermediate = 0
                parameters.removeAll(keepingCapacity: true)
                current = -1
            case UInt8(ascii: "]"): state = .osc
            case UInt8(ascii: "P"), UInt8(ascii: "X"), UInt8(ascii: "^"), UInt8(ascii: "_"): state = .string
            case UInt8(ascii: "="):
                applicationKeypad = true
                state = .ground
            case UInt8(ascii: ">"):
                applicationKeypad = false
                state = .ground
            case UInt8(ascii: "c"):  // RIS: the terminal is back at its defaults
                privateSet = [:]
                ansiSet = [:]
                applicationKeypad = nil
                modifyOtherKeys = nil
                state = .ground
            case 0x30...0x7E: state = .ground
            default: break  // C0 controls act and the sequence goes on
            }
        case .escapeIntermediate:
            if byte >= 0x30 && byte <= 0x7E { state = .ground }
        case .csi:
            switch byte {
            case 0x30...0x39 where intermediate == 0:
                current = min(max(current, 0) * 10 + Int(byte - 0x30), Self.valueLimit)
            case UInt8(ascii: ";") where intermediate == 0:
                guard parameters.count < Self.parameterLimit - 1 else { state = .csiIgnore; return }
                parameters.append(current)
                current = -1
            case 0x3C...0x3F where marker == 0 && parameters.isEmpty && current < 0 && intermediate == 0:
                marker = byte
            case 0x20...0x2F where intermediate == 0:
                intermediate = byte
            case 0x30...0x3F, 0x20...0x2F:  // a sub-parameter, a marker out of place, a second intermediate: none of ours
                state = .csiIgnore
            case 0x40...0x7E:
                if current >= 0 || !parameters.isEmpty { parameters.append(current) }
                dispatch(byte)
                state = .ground
            default: break
            }
        case .csiIgnore:
            if byte >= 0x40 && byte <= 0x7E { state = .ground }
        case .string: break
        case .osc:
            if byte == 0x07 { state = .ground }
        }
    }

    private mutating func dispatch(_ final: UInt8) {
        switch (marker, intermediate, final) {
        case (UInt8(ascii: "?"), 0, UInt8(ascii: "h")), (UInt8(ascii: "?"), 0, UInt8(ascii: "l")):
            for mode in parameters where Self.privateModes.contains(mode) { privateSet[mode] = final == UInt8(ascii: "h") }
        case (0, 0, UInt8(ascii: "h")), (0, 0, UInt8(ascii: "l")):
            for mode in parameters where Self.ansiModes.contains(mode) { ansiSet[mode] = final == UInt8(ascii: "h") }
        case (UInt8(ascii: ">"), 0, UInt8(ascii: "m")):
            if parameters.isEmpty {
                modifyOtherKeys = .initial  // every key-modifier resource reset
            } else if parameters[0] == 4 {
                modifyOtherKeys = parameters.count < 2 || parameters[1] < 0 ? .initial : .level(parameters[1])
            }
        case (UInt8(ascii: ">"), 0, UInt8(ascii: "n")):
            if parameters.first == 4 { modifyOtherKeys = .disabled }
        case (0, UInt8(ascii: "!"), UInt8(ascii: "p")):  // DECSTR: these are back at their defaults
            for mode in [1, 25, 66] { privateSet[mode] = nil }
            ansiSet[4] = nil
            applicationKeypad = nil
        default: break
        }
    }
}
