import Foundation
import Testing
@testable import Staging
import Coordination
import Grants
import Sandbox
import SystemKit
import SystemPackage

/// A scratch home per test: a state folder and a granted folder ("vault").
final class StagingHome {
    let path: String
    let app = try! AppID("com.example.writer")
    let grant = GrantID(hex: String(repeating: "ab", count: 32))!

    init() {
        path = "/var/tmp/sandboxed-run-staging-" + UUID().uuidString
        try! FileManager.default.createDirectory(atPath: path + "/vault", withIntermediateDirectories: true)
    }

    deinit {
        _ = Self.shell("chmod -R u+rwx '\(path)' 2>/dev/null; rm -rf '\(path)'")
    }

    var vault: String { path + "/vault" }
    var statePath: String { path + "/state" }
    var clonePath: String { statePath + "/staging/\(app.rawValue)/\(grant.hex)/current/tree" }

    func state() throws -> StateDirectory { try StateDirectory(path: statePath) }

    func area() throws -> StagingArea { try #require(try StagingArea.open(state: state(), app: app, grant: grant, create: true)) }

    func vaultDescriptor() throws -> OwnedDescriptor { try OwnedDescriptor.openFolder(FilePath(vault), follow: false, use: .read) }

    var staged: StagedGrant { StagedGrant(app: app, grant: grant, name: "VAULT", path: FilePath(vault), bookmark: [1, 2, 3]) }

    /// Runs `script` with sh in `folder`; its exit status.
    @discardableResult
    static func shell(_ script: String, in folder: String? = nil) -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        if let folder { process.currentDirectoryURL = URL(fileURLWithPath: folder) }
        try! process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// The vault's files and folders (and their bytes), for comparing before and after.
    func snapshot(_ root: String? = nil) -> [String: String] {
        var out: [String: String] = [:]
        let base = root ?? vault
        let enumerator = FileManager.default.enumerator(atPath: base)!
        while let name = enumerator.nextObject() as? String {
            if name.hasPrefix(".sandboxed-run-versions") || name.contains("/.sandboxed-run-versions") { continue }
            var status = stat()
            lstat(base + "/" + name, &status)
            switch status.st_mode & S_IFMT {
            case S_IFDIR: out[name] = "folder \(String(status.st_mode & 0o7777, radix: 8))"
            case S_IFLNK: out[name] = "link " + ((try? FileManager.default.destinationOfSymbolicLink(atPath: base + "/" + name)) ?? "?")
            case S_IFREG: out[name] = "file \(String(status.st_mode & 0o7777, radix: 8)) " + ((try? String(contentsOfFile: base + "/" + name, encoding: .utf8)) ?? "<bytes>")
            default: out[name] = "special"
            }
        }
        return out
    }
}

extension StagedChange {
    /// "kind path" or "renamed from -> path", for comparing lists in tests.
    var summary: String {
        let path = String(decoding: self.path, as: UTF8.self)
        if let from { return "\(kind.rawValue) \(String(decoding: from, as: UTF8.self)) -> \(path)" }
        return "\(kind.rawValue) \(path)"
    }
}
