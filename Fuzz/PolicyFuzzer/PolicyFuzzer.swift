// Fuzzes the policy reader (XML and binary property lists, JSON) through
// Policy(data:source:). A trap, an input slower than libFuzzer's -timeout
// (Fuzz/run.sh sets 1 s), or an accepted input that Foundation's decoder
// (what PolicyLoader.swift used before) reads as a different tree is a finding.
//
// Built normally, this is a replayer: `policy-fuzzer FILE...`, or with no
// files 20,000 mutations of the shipped policies;
// `policy-fuzzer --measure N FILE` decodes FILE N times (for callgrind or a
// timing); `policy-fuzzer --show FILE...` prints what each file decodes to;
// `policy-fuzzer --compare FILE...` prints the reader's tree and Foundation's. Fuzz/run.sh policy builds it with libFuzzer.
@preconcurrency import Glibc
import FoundationEssentials
@_spi(Fuzzing) import PolicyOracle
import Policies
@_spi(Fuzzing) import Sandbox

/// The number of values in `value` once expanded, or nil past `budget`.
func values(in value: PolicyValue, budget: Int) -> Int? {
    var count = 0
    var pending = [value]
    while let next = pending.popLast() {
        count += 1
        if count > budget { return nil }
        switch next {
        case .array(let items): pending += items
        case .dictionary(let entries): pending += entries.values
        default: break
        }
    }
    return count
}

func fuzzOne(_ bytes: [UInt8]) {
    let tree: [String: PolicyValue]
    do {
        tree = try PropertyListReader.read(bytes, source: "fuzz")
    } catch {
        // The loader must refuse it the same way.
        do {
            _ = try Policy(data: bytes, source: "fuzz")
            fatalError("Policy(data:) accepted what the reader refused: \(error)")
        } catch let refusal {
            precondition(refusal == error, "\(refusal) != \(error)")
        }
        return
    }
    _ = try? Policy(data: bytes, source: "fuzz")
    // Differential: Foundation's decoder is safe to run only on what the reader
    // accepted (nesting at most 32), and fast only on small trees: it took
    // seconds on a 30,000-value tree of shared references that the reader
    // decodes in a millisecond. A property list the reader accepts, Foundation
    // must accept too, as the same tree: the reader takes no liberty Apple's
    // tools do not. (JSON: where both accept, the trees agree.)
    guard values(in: .dictionary(tree), budget: 2_000) != nil else { return }
    let theirs = FoundationValue.decode(bytes)
    if isPropertyList(bytes), theirs == nil {
        fatalError("Foundation refuses what the reader reads as \(tree)")
    }
    if let theirs, !theirs.matches(.dictionary(tree)) {
        fatalError("Foundation reads \(theirs), the reader \(tree)")
    }
}

/// A binary property list, or text whose first character (after a byte order
/// mark and white space) is '<'.
func isPropertyList(_ bytes: [UInt8]) -> Bool {
    if bytes.starts(with: "bplist".utf8) { return true }
    let text = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? bytes.dropFirst(3) : bytes[...]
    return text.first { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 } == UInt8(ascii: "<")
}

#if FUZZING
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(
    _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    fuzzOne(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}

/// SwiftPM links executables with `main` set to this symbol; hand over to libFuzzer.
@_cdecl("policy_fuzzer_main")
func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runFuzzerDriver(&count, &arguments, fuzzerTestOneInput)
}
#else
func contents(of path: String) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    precondition(fd >= 0, "cannot open \(path)")
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while case let count = read(fd, &chunk, chunk.count), count > 0 { bytes += chunk[..<count] }
    return bytes
}

func nanoseconds() -> Int {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return now.tv_sec * 1_000_000_000 + now.tv_nsec
}

@main
struct Replay {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == "--measure", arguments.count == 3, let times = Int(arguments[1]) {
            let bytes = contents(of: arguments[2])
            let start = nanoseconds()
            var paths = 0
            for _ in 0..<times { paths &+= try! Policy(data: bytes, source: "measure").systemPaths.count }
            let each = times == 0 ? 0 : (nanoseconds() - start) / times
            print("\(times) decodes of \(arguments[2]) (\(bytes.count) bytes): \(each) ns each (\(paths) paths)")
            return
        }
        if arguments.first == "--compare" {
            // What the reader and Foundation's decoder read, side by side.
            for file in arguments.dropFirst() {
                let bytes = contents(of: file)
                let ours = Result { () throws(PolicyError) in try PropertyListReader.read(bytes, source: file) }
                print("\(file):\n  reader:     \(ours)\n  Foundation: \(FoundationValue.decode(bytes).map { "\($0)" } ?? "refused")")
            }
            return
        }
        if arguments.first == "--show" {
            for file in arguments.dropFirst() {
                let start = nanoseconds()
                let outcome = Result { () throws(PolicyError) in try Policy(data: contents(of: file), source: file) }
                let elapsed = Double(nanoseconds() - start) / 1e6
                switch outcome {
                case .success(let policy): print("\(file): \(elapsed) ms: \(policy)")
                case .failure(let error): print("\(file): \(elapsed) ms: \(error)")
                }
            }
            return
        }
        if arguments.isEmpty {
            // Random bytes rarely get past the first check: mutate real policies.
            var generator = SystemRandomNumberGenerator()
            let seeds = BuiltinPolicies.all.map(\.plist)
            for _ in 0..<20_000 {
                var input = seeds.randomElement(using: &generator)!
                for _ in 0..<Int.random(in: 1...8, using: &generator) where !input.isEmpty {
                    let at = Int.random(in: 0..<input.count, using: &generator)
                    switch Int.random(in: 0..<3, using: &generator) {
                    case 0: input[at] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &generator)
                    case 1: input.removeSubrange(at...)
                    default: input.insert(UInt8.random(in: 0...255, using: &generator), at: at)
                    }
                }
                fuzzOne(input)
            }
            print("20000 mutated policies: no finding")
        }
        for file in arguments { fuzzOne(contents(of: file)) }
        if !arguments.isEmpty { print("\(arguments.count) inputs: no finding") }
    }
}
#endif
