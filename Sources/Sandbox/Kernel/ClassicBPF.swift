/// A tiny assembler for the classic BPF that seccomp runs: the syscall
/// filter and its argument guard. Jumps name labels; `assemble()` turns them
/// into the forward offsets the instruction set has (8 bits for a
/// conditional jump, 32 for `jump(to:)`) and refuses what the kernel would
/// reject or misread: an unknown or repeated label, a backward jump, a
/// conditional offset above 255, a program that can fall off its end.
struct ClassicBPF {
    /// How a conditional jump compares the accumulator with a constant.
    enum Condition {
        /// `BPF_JEQ`: A == k.
        case equal
        /// `BPF_JGE`: A >= k, unsigned.
        case greaterOrEqual
        /// `BPF_JSET`: A & k != 0.
        case anyBitSet
    }

    enum AssemblyError: Error, Equatable, CustomStringConvertible {
        case undefinedLabel(String)
        case duplicateLabel(String)
        case backwardJump(String)
        case jumpTooFar(label: String, distance: Int)
        case fallsOffTheEnd
        case tooLong(Int)

        var description: String {
            switch self {
            case .undefinedLabel(let label): "jump to undefined label '\(label)'"
            case .duplicateLabel(let label): "label '\(label)' defined twice"
            case .backwardJump(let label): "backward jump to '\(label)': classic BPF only jumps forward"
            case .jumpTooFar(let label, let distance): "jump to '\(label)' skips \(distance) instructions, more than 255"
            case .fallsOffTheEnd: "the last instruction is not a return"
            case .tooLong(let count): "\(count) instructions, more than seccomp's 4096"
            }
        }
    }

    /// A jump target: made by `newLabel`, placed once by `place`. A number,
    /// not a string: the syscall filter makes about 500 of them at every
    /// launch, and string labels with their dictionary were most of its cost.
    struct Label: Equatable {
        fileprivate let id: Int
    }

    /// Instructions as emitted, with jumps still naming labels; `fallThrough`
    /// is the next instruction.
    private enum Item {
        case place(Int)
        case load(offset: UInt32)
        case jump(Condition, UInt32, then: Int, otherwise: Int)
        /// `BPF_JMP | BPF_JA`: always, as far as needed.
        case always(Int)
        /// `BPF_ALU | BPF_AND | BPF_K`.
        case and(UInt32)
        case ret(UInt32)
    }
    private static let fallThrough = -1

    private var items: [Item] = []
    /// A name per label, for errors only ("" for the filter's numbered ones).
    private var names: [String] = []

    /// Instructions emitted so far (labels take none).
    var instructionCount: Int {
        items.reduce(0) { count, item in if case .place = item { count } else { count + 1 } }
    }

    /// A new label, not yet placed; `name` appears in assembly errors.
    mutating func newLabel(_ name: String = "") -> Label {
        names.append(name)
        return Label(id: names.count - 1)
    }

    /// Marks the position of the next instruction as `label`.
    mutating func place(_ label: Label) { items.append(.place(label.id)) }

    /// `BPF_LD | BPF_W | BPF_ABS`: loads 32 bits of `struct seccomp_data` at `offset`.
    mutating func load(_ offset: UInt32) { items.append(.load(offset: offset)) }

    /// Jumps to `then` when the condition holds, else to `otherwise`; nil
    /// continues with the next instruction.
    mutating func jump(if condition: Condition, _ value: UInt32, then: Label? = nil, else otherwise: Label? = nil) {
        items.append(.jump(condition, value, then: then?.id ?? Self.fallThrough, otherwise: otherwise?.id ?? Self.fallThrough))
    }

    /// `BPF_JMP | BPF_JA`: jumps to `label`, however far ahead.
    mutating func jump(to label: Label) { items.append(.always(label.id)) }

    /// `BPF_ALU | BPF_AND | BPF_K`: keeps the bits of the accumulator that `mask` has.
    mutating func and(_ mask: UInt32) { items.append(.and(mask)) }

    /// `BPF_RET | BPF_K`: ends the program with a seccomp action.
    mutating func ret(_ action: UInt32) { items.append(.ret(action)) }

    /// One `struct sock_filter`.
    struct Instruction: Equatable {
        let code: UInt16
        let jt: UInt8
        let jf: UInt8
        let k: UInt32
    }

    private func name(_ label: Int) -> String { names[label].isEmpty ? "#\(label)" : names[label] }

    func instructions() throws(AssemblyError) -> [Instruction] {
        let unplaced = -1
        var positions = [Int](repeating: unplaced, count: names.count)
        var count = 0
        for item in items {
            if case .place(let label) = item {
                guard positions[label] == unplaced else { throw .duplicateLabel(name(label)) }
                positions[label] = count
            } else {
                count += 1
            }
        }
        guard count <= 4096 else { throw .tooLong(count) }
        var program: [Instruction] = []
        program.reserveCapacity(count)
        for item in items {
            let here = program.count
            func distance(_ label: Int) throws(AssemblyError) -> Int {
                let target = positions[label]
                guard target != unplaced else { throw .undefinedLabel(name(label)) }
                guard target < count else { throw .fallsOffTheEnd }  // a label after the last instruction
                let distance = target - here - 1
                guard distance >= 0 else { throw .backwardJump(name(label)) }
                return distance
            }
            func offset(_ label: Int) throws(AssemblyError) -> UInt8 {
                guard label != Self.fallThrough else { return 0 }
                let distance = try distance(label)
                guard distance <= 255 else { throw .jumpTooFar(label: name(label), distance: distance) }
                return UInt8(distance)
            }
            switch item {
            case .place:
                continue
            case .load(let offset):
                program.append(Instruction(code: 0x20, jt: 0, jf: 0, k: offset))
            case .jump(let condition, let value, let then, let otherwise):
                let code: UInt16 = switch condition {
                case .equal: 0x15
                case .greaterOrEqual: 0x35
                case .anyBitSet: 0x45
                }
                program.append(Instruction(code: code, jt: try offset(then), jf: try offset(otherwise), k: value))
            case .always(let label):
                program.append(Instruction(code: 0x05, jt: 0, jf: 0, k: UInt32(try distance(label))))
            case .and(let mask):
                program.append(Instruction(code: 0x54, jt: 0, jf: 0, k: mask))
            case .ret(let action):
                program.append(Instruction(code: 0x06, jt: 0, jf: 0, k: action))
            }
        }
        guard let last = program.last, last.code == 0x06 else { throw .fallsOffTheEnd }
        return program
    }

    /// The program as the bytes of a `struct sock_filter[]`, in host byte order.
    func assemble() throws(AssemblyError) -> [UInt8] {
        let instructions = try instructions()
        return [UInt8](unsafeUninitializedCapacity: instructions.count * 8) { bytes, initialized in
            let raw = UnsafeMutableRawBufferPointer(bytes)
            for (index, instruction) in instructions.enumerated() {
                raw.storeBytes(of: instruction.code, toByteOffset: index * 8, as: UInt16.self)
                raw.storeBytes(of: instruction.jt, toByteOffset: index * 8 + 2, as: UInt8.self)
                raw.storeBytes(of: instruction.jf, toByteOffset: index * 8 + 3, as: UInt8.self)
                raw.storeBytes(of: instruction.k, toByteOffset: index * 8 + 4, as: UInt32.self)
            }
            initialized = instructions.count * 8
        }
    }
}
