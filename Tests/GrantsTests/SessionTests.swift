import Foundation
import Testing
import SystemPackage
@testable import AppSandbox
@testable import Grants
@testable import Sandbox

/// The trust boundary as a library caller meets it: a session made from an
/// environment protects the broker's state and every container without the
/// caller naming them, as the CLI does.
@Suite struct SessionTests {
    /// A policy that lists the home folder read-only, as a careless or
    /// hostile policy would: the state's keys and other apps' containers lie beneath.
    static func widePolicy(_ home: Home) throws -> Policy {
        var policy = Policy.defaultPolicy
        policy.systemPaths.append(Policy.SystemPath(path: home.path, access: .readOnly))
        return policy
    }

    static func session(_ home: Home) throws -> SandboxSession {
        try SandboxSession(environment: [
            "HOME": home.path, "XDG_STATE_HOME": home.path + "/state", "XDG_DATA_HOME": home.path + "/data", "XDG_RUNTIME_DIR": home.path + "/run",
        ])
    }

    @Test func theLocationsComeFromTheEnvironmentItIsGiven() throws {
        let home = Home()
        let session = try Self.session(home)
        #expect(session.stateDirectory == home.statePath)
        #expect(session.containerBase == home.containers)
        #expect(session.protectedFolders == [home.statePath, home.containers])
        let bare = try SandboxSession(environment: ["HOME": "/home/ada"])
        #expect(bare.protectedFolders == ["/home/ada/.local/state/sandboxed-run", "/home/ada/.local/share/sandboxed-run"])
        #expect(throws: SandboxSessionError.noHome) { try SandboxSession(environment: ["HOME": "relative"]) }
    }

    /// The attack, shown working where a request names no protected folder:
    /// the command reads the broker's sealing key. Through the session, the
    /// same launch is refused before anything runs.
    @Test func aLaunchBuiltThroughTheSessionCannotExposeTheState() throws {
        let home = Home()
        let session = try Self.session(home)
        // A state with a key, as after a first pick.
        _ = try session.broker().grant(app: memo, folder: try home.folder("Vault"), access: .readWrite)
        let keys = try FileManager.default.contentsOfDirectory(atPath: home.statePath + "/keys").filter { $0 != "current" }
        let key = home.statePath + "/keys/" + (try #require(keys.first))
        let read = ["/bin/cat", key]

        var unprotected = LaunchRequest(
            app: memo, policy: try Self.widePolicy(home), command: read, containerBase: home.containers,
            protectedFolders: [], hostEnvironment: [:])
        unprotected.terminal = .never
        let out = Pipe()
        unprotected.standardOutput = out.fileHandleForWriting.fileDescriptor
        let exposed = try ConfinementPlan(unprotected).launch().wait()
        try out.fileHandleForWriting.close()
        #expect(exposed == .exited(0))
        #expect(try !out.fileHandleForReading.readAll().isEmpty, "the attack did not work: the test proves nothing")

        let request = try session.launchRequest(app: memo, policy: try Self.widePolicy(home), command: read)
        #expect(request.protectedFolders == [home.statePath, home.containers])
        #expect {
            _ = try ConfinementPlan(request)
        } throws: { error in
            guard case SandboxError.policy(let problem) = error else { return false }
            return problem.problem.contains("would expose sandboxed-run's own \(home.statePath)")
        }
    }

    @Test func aGrantHoldingTheContainersIsRefusedThroughTheSession() throws {
        let home = Home()
        let session = try Self.session(home)
        let request = try session.launchRequest(app: memo, policy: .defaultPolicy, command: ["/bin/true"])
        var withGrant = request
        let data = home.path + "/data"
        try FileManager.default.createDirectory(atPath: home.containers, withIntermediateDirectories: true)
        withGrant.folders = [PathRule(grant: "DATA", path: FilePath(data), descriptor: try .openPath(FilePath(data), follow: true), access: .readWrite)]
        #expect(throws: SandboxError.self) { _ = try ConfinementPlan(withGrant) }
    }

    /// A policy's read-write folders are recorded before the launch: links
    /// the command plants there are then distrusted by every unconfined path.
    @Test func aPolicysWritableFoldersAreRecordedBeforeTheLaunch() throws {
        let home = Home()
        let session = try Self.session(home)
        let shared = try home.folder("shared")
        var policy = Policy.defaultPolicy
        policy.systemPaths.append(Policy.SystemPath(path: shared, access: .readWrite))
        _ = try session.launchRequest(app: memo, policy: policy, command: ["/bin/true"])
        let recorded = try session.broker().everWritableFolders()
        let handle = try #require(LinkTrust.handle(of: try .openPath(FilePath(shared), follow: true)))
        #expect(recorded.contains { $0.handle == handle })
        #expect(session.linkTrust().appMayHaveWritten(try .openPath(FilePath(shared), follow: true)) != nil)
    }

    @Test func aSecurityScopedURLPrintsItsPath() throws {
        let home = Home()
        let session = try Self.session(home)
        let vault = try home.folder("vault")
        let data = try session.broker().bookmarkData(forFolder: vault, app: try AppID("com.example.memo"))
        var isStale = false
        let url = try SecurityScope.local(session: session, app: try AppID("com.example.memo"))
            .url(resolvingBookmarkData: data, bookmarkDataIsStale: &isStale)
        #expect("\(url)" == vault)
        #expect(String(describing: url) == vault)
        #expect(String(reflecting: url) == "SecurityScopedURL(\(vault))")
    }
}
