// Fuzzes bookmark decoding through the public resolve API. The first byte
// picks how far the input gets:
//   0: raw bytes (header parsing)
//   1: a genuine header + the bytes (authentication)
//   2: the bytes sealed with the broker's real key (the payload decoder)
// Any trap, or garbage that resolves to a folder, is a finding.
//
// Built normally, this is a replayer: `bookmark-fuzzer FILE...` or, with no
// files, 20,000 random inputs. Fuzz/run.sh builds it with libFuzzer.
@preconcurrency import Glibc
import Crypto
import Grants
import Sandbox

final class Fixture {
    let broker: GrantBroker
    let app: AppID
    let header: [UInt8]
    let key: SymmetricKey

    init() {
        let root = "/tmp/sandboxed-run-fuzz-\(getpid())"
        mkdir(root, 0o700)
        mkdir(root + "/vault", 0o700)
        app = try! AppID("com.example.fuzz")
        broker = try! GrantBroker(state: StateDirectory(path: root + "/state"))
        _ = try! broker.grant(app: app, folder: root + "/vault", access: .readWrite)
        let keyID = String(decoding: try! AtomicFile.read(root + "/state/keys/current"), as: UTF8.self).split(separator: "\n")[0]
        key = SymmetricKey(data: try! AtomicFile.read(root + "/state/keys/\(keyID).key"))
        var id: [UInt8] = []
        var digits = Array(keyID.utf8)[...]
        while digits.count >= 2 {
            id.append(UInt8(String(decoding: digits.prefix(2), as: UTF8.self), radix: 16)!)
            digits = digits.dropFirst(2)
        }
        header = Array("SRBM".utf8) + [1] + id + [UInt8(app.rawValue.utf8.count)] + Array(app.rawValue.utf8)
    }
}

nonisolated(unsafe) let fixture = Fixture()

func fuzzOne(_ bytes: [UInt8]) {
    guard let mode = bytes.first else { return }
    let body = Array(bytes.dropFirst())
    let blob: [UInt8]
    switch mode % 3 {
    case 0: blob = body
    case 1: blob = fixture.header + body
    default: blob = fixture.header + Array(try! ChaChaPoly.seal(body, using: fixture.key, authenticating: fixture.header).combined)
    }
    let resolution = try! fixture.broker.resolve(blob, app: fixture.app)
    if resolution.status == .fresh || resolution.status == .moved {
        fatalError("fuzz input resolved to \(resolution.currentPath ?? "?")")
    }
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
@_cdecl("bookmark_fuzzer_main")
func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runFuzzerDriver(&count, &arguments, fuzzerTestOneInput)
}
#else
@main
struct Replay {
    static func main() throws {
        let files = CommandLine.arguments.dropFirst()
        if files.isEmpty {
            var generator = SystemRandomNumberGenerator()
            for _ in 0..<20_000 {
                fuzzOne((0..<Int.random(in: 0..<300, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) })
            }
            print("20000 random inputs: no finding")
        }
        for file in files { fuzzOne(try AtomicFile.read(file)) }
        if !files.isEmpty { print("\(files.count) inputs: no finding") }
    }
}
#endif
